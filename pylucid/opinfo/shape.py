"""Op records of the ``shape`` family (being written)."""

from pylucid.opinfo.records import OpInfo

RECORDS: tuple[OpInfo, ...] = ()
