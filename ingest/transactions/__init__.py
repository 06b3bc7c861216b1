"""Source transactions (issue 13): Debezium's transaction metadata read, and the book that decides
which transactions a commit publishes so that every lake version shows them whole.

* :mod:`ingest.transactions.markers` - the transaction topic's BEGIN/END markers and the
  ``transaction`` block of change events;
* :mod:`ingest.transactions.book` - :class:`TransactionBook`, the pure bookkeeping of what is
  complete, held, published (the prefix rule is explained there);
* :mod:`ingest.transactions.order` - commit order of END markers spread over several
  partitions of the transaction topic;
* :mod:`ingest.transactions.policy` - the ``transactions`` mode and ``on_timeout``.
"""

from ingest.transactions.book import (
    BadTransactionState,
    Decision,
    HoldWarning,
    PartitionTail,
    Point,
    TransactionBook,
    TxnEvents,
    TxnState,
)
from ingest.transactions.markers import (
    BadTransactionMetadata,
    MarkerStatus,
    TransactionMarker,
    TransactionRef,
    decode_ends,
    decode_marker,
    is_transaction_topic,
    normalise_id,
    transaction_ref,
)
from ingest.transactions.order import EndOrder, UnorderedTransactions
from ingest.transactions.policy import (
    DEFAULT_MAX_HOLD_S,
    DEFAULT_PARTITION_IDLE_S,
    OnTimeout,
    TransactionConfigError,
    TransactionMode,
    resolve_mode,
)

__all__ = [
    "DEFAULT_MAX_HOLD_S",
    "DEFAULT_PARTITION_IDLE_S",
    "EndOrder",
    "UnorderedTransactions",
    "BadTransactionMetadata",
    "BadTransactionState",
    "Decision",
    "HoldWarning",
    "MarkerStatus",
    "OnTimeout",
    "PartitionTail",
    "Point",
    "TransactionBook",
    "TransactionConfigError",
    "TransactionMarker",
    "TransactionMode",
    "TransactionRef",
    "TxnEvents",
    "TxnState",
    "decode_ends",
    "decode_marker",
    "is_transaction_topic",
    "normalise_id",
    "resolve_mode",
    "transaction_ref",
]
