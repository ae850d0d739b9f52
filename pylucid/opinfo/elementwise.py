"""Op records of the ``elementwise`` family (being written)."""

from pylucid.opinfo.records import OpInfo

RECORDS: tuple[OpInfo, ...] = ()
