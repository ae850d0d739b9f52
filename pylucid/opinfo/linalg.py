"""Op records of the ``linalg`` family (being written)."""

from pylucid.opinfo.records import OpInfo

RECORDS: tuple[OpInfo, ...] = ()
