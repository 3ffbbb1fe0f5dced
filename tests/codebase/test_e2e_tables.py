"""The e2e suite reads `kubectl get` tables as a user sees them; an empty cell must not
shift the cells after it."""

from __future__ import annotations

from e2e.lib.fleet import table_row


def test_an_empty_cell_reads_empty_and_leaves_the_others_in_their_columns() -> None:
    header = "NAME        REPLICAS   DESIRED   READY   PENDING   RUNNING   DEAD   AGE"
    row = "lifecycle   2                    2       0         0         1      25s"

    assert table_row(header, row) == {
        "NAME": "lifecycle",
        "REPLICAS": "2",
        "DESIRED": "",
        "READY": "2",
        "PENDING": "0",
        "RUNNING": "0",
        "DEAD": "1",
        "AGE": "25s",
    }
