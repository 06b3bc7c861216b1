"""The exactly-once foreachBatch sink: executors write files, the driver makes one commit."""
