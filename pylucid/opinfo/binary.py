"""Op records of the ``binary`` family (being written)."""

from pylucid.opinfo.records import OpInfo

RECORDS: tuple[OpInfo, ...] = ()
