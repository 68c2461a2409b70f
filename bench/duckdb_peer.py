#!/usr/bin/env python3
"""The DuckDB peer of SPEC §7 for fencewatch-bench: the stale-commit SQL over one NDJSON file.

usage: duckdb_peer.py FILE SQL [text-ts]  (SQL reads table `events`); prints {"count", "seconds"}.
The file is read with the columns of the DataFusion peer's schema, every one nullable, as
newline-delimited JSON, with DuckDB's default settings (all cores). With `text-ts`, the file's
`ts` is RFC 3339 text, converted to nanoseconds in the table (offsets applied, nine fraction
digits kept), as the DataFusion peer does."""

import json
import sys
import time

import duckdb

COLUMNS = {
    "kind": "VARCHAR",
    "scope": "VARCHAR",
    "epoch": "UBIGINT",
    "ts": "BIGINT",
    "route": "VARCHAR",
    "holder": "VARCHAR",
    "outcome": "VARCHAR",
}


# RFC 3339 text as nanoseconds. DuckDB's cast to TIMESTAMP_NS keeps nine fraction digits but
# drops a `+hh:mm`/`-hh:mm` offset (reading the local time as UTC: 2.0.1) and refuses a lower-case
# `z` or `t`: the text is upper-cased, cast, and the offset subtracted from the result.
TEXT_TS_NS = (
    "(epoch_ns(CAST(upper(ts) AS TIMESTAMP_NS)) - CASE WHEN substr(ts, -6, 1) IN ('+', '-') "
    "THEN (CAST(substr(ts, -5, 2) AS BIGINT) * 3600 + CAST(substr(ts, -2, 2) AS BIGINT) * 60) "
    "* 1000000000 * CASE WHEN substr(ts, -6, 1) = '-' THEN -1 ELSE 1 END ELSE 0 END)"
)


def main() -> int:
    if len(sys.argv) not in (3, 4) or sys.argv[3:] not in ([], ["text-ts"]):
        print(__doc__, file=sys.stderr)
        return 64
    path, sql = sys.argv[1], sys.argv[2]
    text_ts = sys.argv[3:] == ["text-ts"]
    started = time.monotonic()
    con = duckdb.connect()
    types = dict(COLUMNS, ts="VARCHAR") if text_ts else COLUMNS
    columns = "{" + ", ".join(f"'{k}': '{v}'" for k, v in types.items()) + "}"
    literal = "'" + path.replace("'", "''") + "'"
    select = f"kind, scope, epoch, {TEXT_TS_NS} AS ts, route, holder, outcome" if text_ts else "*"
    con.execute(
        f"CREATE VIEW events AS SELECT {select} FROM read_json({literal}, "
        f"format = 'newline_delimited', columns = {columns})"
    )
    (count,) = con.execute(sql).fetchone()
    print(json.dumps({"count": count, "seconds": time.monotonic() - started}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
