"""A script's own messages through Lightning's helpers: `rank_zero_info` reaches standard error,
`rank_zero_debug` nothing (the "lightning.pytorch" logger at INFO); what it prints, standard output."""

import record
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.rank_zero import rank_zero_debug

rank_zero_info("an info message")
rank_zero_debug("a debug message")
print("printed")
record.put("done", True)
