"""Op records of the ``reduction`` family (being written)."""

from pylucid.opinfo.records import OpInfo

RECORDS: tuple[OpInfo, ...] = ()
