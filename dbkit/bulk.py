"""Writing many rows of any model in a few statements, for the paths that handle thousands of
rows at once (the schedule cycle's admissions, a batch of pod reports). Knows no model of its own."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, models, transaction


def delete_in_batches(queryset, size: int = 1000) -> int:
    """Delete the rows of `queryset` (and what cascades from them) `size` rows at a time; returns how
    many of its rows went. One delete() collects every row's key into each statement, more than a
    database takes for a large set (PostgreSQL: 65,535 parameters)."""
    deleted = 0
    while pks := list(queryset.order_by("pk").values_list("pk", flat=True)[:size]):
        deleted += queryset.model.objects.filter(pk__in=pks).delete()[1].get(queryset.model._meta.label, 0)
    return deleted


def update_many(model, columns: tuple[str, ...], keys: tuple[str, ...], rows: list[tuple],
                extra_where: str = "", extra_params: tuple = ()) -> int:
    """UPDATE model SET columns WHERE keys (and extra_where) for every row; returns rows changed.

    PostgreSQL: one statement for all rows, sent as one JSON array (`_json_rows`), since a statement
    per row is slow even pipelined. SQLite, in process: one plain statement run per row. Not
    bulk_update: building its CASE over thousands of rows costs more than the statements. Values are
    prepared by the model's fields; keys must pick one row each. A column may be both set and a key
    (its new value, and the one it must have).
    """
    if not rows:
        return 0
    meta, q = model._meta, connection.ops.quote_name
    fields = [meta.get_field(name) for name in columns + keys]
    sets, wheres = fields[:len(columns)], fields[len(columns):]
    extra = f" AND {extra_where}" if extra_where else ""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            payload, source = _json_rows(fields, rows)
            names = [f"v{i}" for i in range(len(fields))]
            sql = (f"UPDATE {q(meta.db_table)} AS t SET "
                   + ", ".join(f"{q(f.column)} = v.{n}" for f, n in zip(sets, names))
                   + f" FROM {source} WHERE "
                   + " AND ".join(f"t.{q(f.column)} = v.{n}" for f, n in zip(wheres, names[len(sets):]))
                   + extra)
            cursor.execute(sql, [payload, *extra_params])
        else:
            sql = (f"UPDATE {q(meta.db_table)} SET {', '.join(f'{q(f.column)} = %s' for f in sets)} "
                   f"WHERE {' AND '.join(f'{q(f.column)} = %s' for f in wheres)}{extra}")
            prepare = [_preparer(f) for f in fields]
            cursor.executemany(sql, [[*(p(v) for p, v in zip(prepare, row)), *extra_params] for row in rows])
        return cursor.rowcount


# Fields whose plain int, str and bool values (and None) go to the database as they are. Django's
# get_db_prep_save for them was most of the cost of writing a large admission.
_PLAIN_FIELDS = {"AutoField", "BigAutoField", "BigIntegerField", "BooleanField", "CharField", "ForeignKey",
                 "IntegerField", "PositiveBigIntegerField", "PositiveIntegerField", "PositiveSmallIntegerField",
                 "SmallIntegerField", "TextField"}
_PLAIN_VALUES = (int, str, bool, type(None))


def _json_rows(fields: list, rows: list[tuple]) -> tuple[str, str]:
    """The rows (a value per field each) as one JSON parameter, and the SQL that reads them back
    as a table `v` of columns v0, v1, ... of the fields' types (`_json_source`).

    One JSON text rather than an array per column (unnest): psycopg dumps arrays element by
    element in Python, json.dumps in C, so the client spends less CPU for the same statement."""
    return _json_payload(fields, rows), _json_source(fields)


def _json_payload(fields: list, rows: list[tuple]) -> str:
    prepare = [_json_preparer(f) for f in fields]
    keys = [f"v{i}" for i in range(len(fields))]  # once, not again for every value of every row
    return json.dumps([{k: p(v) for k, p, v in zip(keys, prepare, row)} for row in rows])


def _json_source(fields: list) -> str:
    columns = ", ".join(f"v{i} {f.db_type(connection)}" for i, f in enumerate(fields))
    return f"json_to_recordset(%s::json) AS v({columns})"


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
class Insert:
    """Rows of these columns (field names) for model's table (insert_rows). `on_conflict`: a clause
    that follows the rows, in the syntax PostgreSQL and SQLite share (`ON CONFLICT (...) DO ...`)."""

    model: type
    columns: tuple[str, ...]
    rows: list[tuple]
    on_conflict: str = ""


def insert_rows(*inserts: Insert) -> None:
    """INSERT each Insert's rows, without model instances.

    PostgreSQL: one statement for all of them (each but the last a data-modifying WITH query), each
    table's rows one JSON array (`_json_rows`, as update_many). The ORM's bulk_create compiled a
    placeholder and prepared every value through its field, which was most of recording a busy
    cycle's history; and one statement a table is a round trip each. SQLite: one plain statement run
    per row. Values are prepared by the models' fields.
    """
    inserts = [i for i in inserts if i.rows]
    if not inserts:
        return
    q = connection.ops.quote_name
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            statements, params = [], []
            for i in inserts:
                fields = [i.model._meta.get_field(name) for name in i.columns]
                payload, source = _json_rows(fields, i.rows)
                statements.append(f"INSERT INTO {q(i.model._meta.db_table)} ({', '.join(q(f.column) for f in fields)}) "
                                  f"SELECT * FROM {source} {i.on_conflict}")
                params.append(payload)
            with_queries = ", ".join(f"i{n} AS ({sql})" for n, sql in enumerate(statements[:-1]))
            cursor.execute((f"WITH {with_queries} " if with_queries else "") + statements[-1], params)
            return
        for i in inserts:
            fields = [i.model._meta.get_field(name) for name in i.columns]
            prepare = [_preparer(f) for f in fields]
            cursor.executemany(f"INSERT INTO {q(i.model._meta.db_table)} ({', '.join(q(f.column) for f in fields)}) "
                               f"VALUES ({', '.join(['%s'] * len(fields))}) {i.on_conflict}",
                               [[p(v) for p, v in zip(prepare, row)] for row in i.rows])


def insert_family(parent: models.Model, children: Iterable[models.Model]) -> None:
    """Insert a new `parent` row and its `children` (new rows of models with a foreign key to the
    parent's model, pointing at it) and set parent.pk. The children's pks stay unset. All or
    nothing, inside a transaction or not.

    PostgreSQL: one statement (`_family_statement`), where the ORM's save and one bulk_create per
    child model were five statements and five round trips for create_job. Each model's rows go as
    one JSON parameter (`_json_rows`), so that the statement has a handful of parameters whatever
    the models' columns, since with a parameter per column psycopg parsed the text afresh at every
    call and dumped every array on its own.
    Elsewhere (SQLite, in process): those five statements, in a transaction. Values are prepared
    by the models' fields, as save() prepares them.
    """
    groups: dict[type, list[models.Model]] = {}
    for child in children:
        groups.setdefault(type(child), []).append(child)
    links = {model: _link(model, type(parent)) for model in groups}
    if connection.vendor != "postgresql":
        with transaction.atomic():
            parent.save(force_insert=True)
            for model, rows in groups.items():
                for row in rows:
                    setattr(row, links[model].name, parent)
                model.objects.bulk_create(rows)
        return
    with connection.cursor() as cursor:
        cursor.execute(_family_statement(type(parent), tuple(groups)),
                       [_family_json([parent], None), *(_family_json(rows, links[m]) for m, rows in groups.items())])
        parent.pk = cursor.fetchone()[0]
    parent._state.adding, parent._state.db = False, connection.alias
    for model, rows in groups.items():
        for row in rows:
            setattr(row, links[model].name, parent)
            row._state.adding, row._state.db = False, connection.alias


@functools.cache
def _family_statement(parent: type, children: tuple[type, ...]) -> str:
    """The parent's INSERT ... RETURNING as a WITH query, and one INSERT per child model, each
    model's rows read from its JSON parameter (`_json_source`), the children's key taken from the
    parent's. Cached: it is the same for every job."""
    q, pk = connection.ops.quote_name, connection.ops.quote_name(parent._meta.pk.column)

    def rows_of(model: type, link) -> tuple[str, str]:
        """The columns an insert of the model sets, and the rows' values of them, from JSON."""
        fields = _inserted(model._meta, link)
        return (", ".join(q(f.column) for f in fields),
                ", ".join(f"v.v{i}" for i in range(len(fields))) + f" FROM {_json_source(fields)}")

    columns, rows = rows_of(parent, None)
    sql = [f"WITH p AS (INSERT INTO {q(parent._meta.db_table)} ({columns}) SELECT {rows} RETURNING {pk})"]
    for n, model in enumerate(children):
        link = _link(model, parent)
        columns, rows = rows_of(model, link)
        sql.append(f", c{n} AS (INSERT INTO {q(model._meta.db_table)} ({q(link.column)}, {columns}) "
                   f"SELECT p.{pk}, {rows} CROSS JOIN p)")
    sql.append(f" SELECT {pk} FROM p")
    return "".join(sql)


def _family_json(rows: list[models.Model], link) -> str:
    """Rows of one model as `_family_statement` reads them: the columns `_inserted` names (all but
    the link to the parent), each value as save() would take it (pre_save)."""
    fields = _inserted(rows[0]._meta, link)
    return _json_payload(fields, [[f.pre_save(row, True) for f in fields] for row in rows])


@functools.cache
def _json_preparer(field):
    """value -> its JSON value: what get_db_prep_save gives, with datetimes and decimals as the
    text PostgreSQL reads them from, and a JSONField's value as it is (its own JSON)."""
    kind = field.get_internal_type()
    if kind == "JSONField":
        if field.encoder is not None:
            return lambda value: json.loads(json.dumps(value, cls=field.encoder))
        return field.get_prep_value
    prepare = _preparer(field)
    if kind in ("DateTimeField", "DateField", "DecimalField"):
        return lambda value: None if (value := prepare(value)) is None else _text(value)
    if kind not in _PLAIN_FIELDS:
        raise NotImplementedError(f"cannot write {field} ({kind}) as JSON yet")
    # A str or int subclass (a TextChoices member) is written as its str or int value by json.dumps.
    return lambda value: value if isinstance(value, (str, int)) or value is None else prepare(value)


def _text(value) -> str:
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def _link(model: type, parent: type) -> models.ForeignKey:
    """The one foreign key of `model` to `parent`."""
    (link,) = (f for f in model._meta.concrete_fields if f.is_relation and f.related_model is parent)
    return link


def _inserted(meta, link) -> list:
    """The columns an insert of this model sets: all but an automatic pk and the parent's key."""
    return [f for f in meta.concrete_fields if f is not link and f is not meta.auto_field]
