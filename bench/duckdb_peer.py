#!/usr/bin/env python3
"""The DuckDB peer of SPEC §7 for fencewatch-bench: the stale-commit SQL over one NDJSON file.

usage: duckdb_peer.py FILE SQL  (SQL reads table `events`); prints {"count", "seconds"}.
The file is read with the columns of the DataFusion peer's schema, every one nullable, as
newline-delimited JSON, with DuckDB's default settings (all cores)."""

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


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 64
    path, sql = sys.argv[1], sys.argv[2]
    started = time.monotonic()
    con = duckdb.connect()
    columns = "{" + ", ".join(f"'{k}': '{v}'" for k, v in COLUMNS.items()) + "}"
    literal = "'" + path.replace("'", "''") + "'"
    con.execute(
        f"CREATE VIEW events AS SELECT * FROM read_json({literal}, "
        f"format = 'newline_delimited', columns = {columns})"
    )
    (count,) = con.execute(sql).fetchone()
    print(json.dumps({"count": count, "seconds": time.monotonic() - started}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
