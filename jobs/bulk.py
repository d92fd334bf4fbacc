"""Writing many rows in a few statements, for the paths that handle thousands of jobs at once
(the schedule cycle's admissions, a batch of pod reports)."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, models

from jobs.models import Job, JobEvent, StatusTransition
from jobs.states import JobStatus, check_transition


def update_many(model, columns: tuple[str, ...], keys: tuple[str, ...], rows: list[tuple],
                extra_where: str = "", extra_params: tuple = ()) -> int:
    """UPDATE model SET columns WHERE keys (and extra_where) for every row; returns rows changed.

    PostgreSQL: one statement for all rows, each column's values sent as one array and unnested
    (`UPDATE ... FROM unnest(...)`): a cycle writing the reasons of 6,000 waiting jobs took 0.5 s
    as 6,000 statements, even pipelined. SQLite, in process: one plain statement run per row.
    Not bulk_update: building its CASE over thousands of rows costs more than the statements.
    Values are prepared by the model's fields (`_preparer`); keys must pick one row each.
    """
    if not rows:
        return 0
    meta, q = model._meta, connection.ops.quote_name
    fields = [meta.get_field(name) for name in columns + keys]
    sets, wheres = fields[:len(columns)], fields[len(columns):]
    extra = f" AND {extra_where}" if extra_where else ""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            arrays = [list(map(_preparer(f), (row[i] for row in rows))) for i, f in enumerate(fields)]
            names = [f"v{i}" for i in range(len(fields))]
            sql = (f"UPDATE {q(meta.db_table)} AS t SET "
                   + ", ".join(f"{q(f.column)} = v.{n}" for f, n in zip(sets, names))
                   + " FROM unnest(" + ", ".join(f"%s::{f.db_type(connection)}[]" for f in fields)
                   + f") AS v({', '.join(names)}) WHERE "
                   + " AND ".join(f"t.{q(f.column)} = v.{n}" for f, n in zip(wheres, names[len(sets):]))
                   + extra)
            cursor.execute(sql, [*arrays, *extra_params])
        else:
            sql = (f"UPDATE {q(meta.db_table)} SET {', '.join(f'{q(f.column)} = %s' for f in sets)} "
                   f"WHERE {' AND '.join(f'{q(f.column)} = %s' for f in wheres)}{extra}")
            prepare = [_preparer(f) for f in fields]
            cursor.executemany(sql, [[*(p(v) for p, v in zip(prepare, row)), *extra_params] for row in rows])
        return cursor.rowcount


# Fields whose plain int, str and bool values (and None) go to the database as they are. Django's
# get_db_prep_save for them was most of the cost of writing an admission of 600 pods.
_PLAIN_FIELDS = {"AutoField", "BigAutoField", "BigIntegerField", "BooleanField", "CharField", "ForeignKey",
                 "IntegerField", "PositiveBigIntegerField", "PositiveIntegerField", "PositiveSmallIntegerField",
                 "SmallIntegerField", "TextField"}
_PLAIN_VALUES = (int, str, bool, type(None))


def _preparer(field):
    """value -> what the database gets, as field.get_db_prep_save would give it."""
    def prepare(value):
        return field.get_db_prep_save(value, connection)

    kind = field.get_internal_type()
    if kind == "DateTimeField" and connection.vendor == "postgresql":
        # An aware datetime goes to psycopg as it is (what get_db_prep_save returns for it, after
        # its checks): a cycle's bind times and history rows are thousands of them.
        return lambda value: value if type(value) is datetime and value.tzinfo is not None else prepare(value)
    if kind not in _PLAIN_FIELDS:
        return prepare
    return lambda value: value if type(value) in _PLAIN_VALUES else prepare(value)


@dataclass(frozen=True)
class Transition:
    job: Job
    previous: str
    status: str
    reason: str
    message: str
    at: datetime


def transition(job: Job, target: str, *, reason: str, message: str, at: datetime) -> Transition:
    """Job.transition on the instance only (checked, timestamps set): save it and record the
    returned Transition with `record`, for many jobs at once."""
    check_transition(job.status, target)
    previous, job.status = job.status, target
    job.reason_code, job.reason_message = reason, message
    if target == JobStatus.RUNNING and job.running_at is None:
        job.running_at = at
    if target in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
        job.finished_at = at
    return Transition(job, previous, target, reason, message, at)


def record(transitions: list[Transition]) -> None:
    """The status history and event Job.transition writes, for many transitions in two inserts."""
    insert_many(StatusTransition, ("job", "previous", "status", "reason", "message", "at"),
                [(t.job.pk, t.previous, t.status, t.reason, t.message, t.at) for t in transitions])
    insert_many(JobEvent, ("job", "at", "type", "reason", "message"),
                [(t.job.pk, t.at, _event_type(t), _event_reason(t), _event_message(t)) for t in transitions])


def history_rows(transitions: list[Transition]) -> tuple[list[StatusTransition], list[JobEvent]]:
    """The unsaved StatusTransition and JobEvent rows that record `transitions` (as `record` writes
    them), for a caller that inserts them with other rows."""
    return ([StatusTransition(job=t.job, previous=t.previous, status=t.status, reason=t.reason, message=t.message,
                              at=t.at) for t in transitions],
            [JobEvent(job=t.job, at=t.at, reason=_event_reason(t), type=_event_type(t), message=_event_message(t))
             for t in transitions])


def _event_type(t: Transition) -> str:
    return JobEvent.Type.WARNING if t.status in (JobStatus.FAILED, JobStatus.RESTARTING) else JobEvent.Type.NORMAL


def _event_reason(t: Transition) -> str:
    return t.reason or t.status


def _event_message(t: Transition) -> str:
    return t.message or f"Job status changed from {t.previous} to {t.status}"


def insert_many(model, columns: tuple[str, ...], rows: list[tuple]) -> None:
    """INSERT rows of these columns (field names) into model's table, without model instances.

    PostgreSQL: one statement, each column's values one array, unnested (as update_many). The
    ORM's bulk_create compiled a placeholder and prepared every value through its field: most of
    recording the history of a cycle's 600 admissions (bench/cycle_profile.py). SQLite: one plain
    statement run per row. Values are prepared by the model's fields (`_preparer`).
    """
    if not rows:
        return
    meta, q = model._meta, connection.ops.quote_name
    fields = [meta.get_field(name) for name in columns]
    prepare = [_preparer(f) for f in fields]
    names = ", ".join(q(f.column) for f in fields)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            arrays = [[p(row[i]) for row in rows] for i, p in enumerate(prepare)]
            cursor.execute(f"INSERT INTO {q(meta.db_table)} ({names}) SELECT * FROM unnest("
                           + ", ".join(f"%s::{f.db_type(connection)}[]" for f in fields) + ")", arrays)
        else:
            cursor.executemany(f"INSERT INTO {q(meta.db_table)} ({names}) VALUES ({', '.join(['%s'] * len(fields))})",
                               [[p(v) for p, v in zip(prepare, row)] for row in rows])


def insert_family(parent: models.Model, children: Iterable[models.Model]) -> None:
    """Insert a new `parent` row and its `children` (new rows of models with a foreign key to the
    parent's model, pointing at it) and set parent.pk. The children's pks stay unset.

    PostgreSQL: one statement (`_family_sql`), where the ORM's save and one bulk_create per child
    model were five statements and five round trips for create_job: about 1 ms less client CPU
    and 1.5 ms less wall time for a 5-pod job (7-8 ms before, measured alternating; one-pod jobs
    gained nothing measurable). Elsewhere (SQLite, in process): those. Values are prepared by the
    models' fields, as save() prepares them.
    """
    groups: dict[type, list[models.Model]] = {}
    for child in children:
        groups.setdefault(type(child), []).append(child)
    links = {model: _link(model, type(parent)) for model in groups}
    one_statement = connection.vendor == "postgresql"
    if one_statement:
        with connection.cursor() as cursor:
            cursor.execute(*_family_sql(parent, groups))
            parent.pk = cursor.fetchone()[0]
        parent._state.adding, parent._state.db = False, connection.alias
    else:
        parent.save(force_insert=True)
    for model, rows in groups.items():
        for row in rows:
            setattr(row, links[model].name, parent)
            if one_statement:
                row._state.adding, row._state.db = False, connection.alias
        if not one_statement:
            model.objects.bulk_create(rows)


def _family_sql(parent: models.Model, groups: dict[type, list[models.Model]]) -> tuple[str, list]:
    """The parent's INSERT ... RETURNING as a WITH query, and one INSERT per child model whose rows
    are unnested from one array per column, their key taken from the parent's."""
    sql, fields, columns = _family_statement(type(parent), tuple(groups))
    params = [_preparer(f)(f.pre_save(parent, True)) for f in fields]
    for rows, cols in zip(groups.values(), columns):
        params += [[prepare(f.pre_save(row, True)) for row in rows] for f, prepare in zip(cols, map(_preparer, cols))]
    return sql, params


@functools.cache
def _family_statement(parent: type, children: tuple[type, ...]) -> tuple[str, list, list[list]]:
    """_family_sql's text for these models, with the parent's columns and each child model's, in
    the order of their parameters. Cached: it is the same for every job, and building it (column
    types, quoting) took about 0.5 ms of a 5-pod create_job's 3.5-5 ms of client CPU."""
    q, pk = connection.ops.quote_name, connection.ops.quote_name(parent._meta.pk.column)
    fields = _inserted(parent._meta, None)
    sql = [f"WITH p AS (INSERT INTO {q(parent._meta.db_table)} ({', '.join(q(f.column) for f in fields)}) "
           f"VALUES ({', '.join(['%s'] * len(fields))}) RETURNING {pk})"]
    columns = []
    for n, model in enumerate(children):
        link = _link(model, parent)
        cols = _inserted(model._meta, link)
        names = [f"v{i}" for i in range(len(cols))]
        sql.append(f", c{n} AS (INSERT INTO {q(model._meta.db_table)} ({q(link.column)}, "
                   f"{', '.join(q(f.column) for f in cols)}) SELECT p.{pk}, "
                   f"{', '.join(f'v.{name}' for name in names)} FROM p, unnest("
                   f"{', '.join(f'%s::{f.db_type(connection)}[]' for f in cols)}) AS v({', '.join(names)}))")
        columns.append(cols)
    sql.append(" SELECT * FROM p")
    return "".join(sql), fields, columns


def _link(model: type, parent: type) -> models.ForeignKey:
    """The one foreign key of `model` to `parent`."""
    (link,) = (f for f in model._meta.concrete_fields if f.is_relation and f.related_model is parent)
    return link


def _inserted(meta, link) -> list:
    """The columns an insert of this model sets: all but an automatic pk and the parent's key."""
    return [f for f in meta.concrete_fields if f is not link and f is not meta.auto_field]
