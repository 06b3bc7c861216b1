"""lakestream's compactor: plans, queues and runs the rewrites that keep tables fast to read.

Every error the compactor raises itself derives from :class:`CompactionError`; the catalog's
errors (all :class:`catalog.CatalogError`) pass through as they are. Never imports pyspark.
"""

from compaction.errors import CompactionError
from compaction.policy import InvalidPolicyError
from compaction.queue import QueueUnavailable
from compaction.rewrite import InvalidTaskError

__all__ = ["CompactionError", "InvalidPolicyError", "InvalidTaskError", "QueueUnavailable"]
