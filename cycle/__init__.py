"""The schedule cycle against the database: snapshot -> scheduler.plan -> apply -> dispatch."""
