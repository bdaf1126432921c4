"""Two gloo ranks gather 1-D tensors of different lengths (launched by torchrun)."""

import torch
import torch.distributed as dist

from lightning_rlvr.core.distributed import all_sum, gather_values, max_over_ranks

dist.init_process_group("gloo")
rank = dist.get_rank()
values = torch.arange(3 + rank, dtype=torch.float32) + 10 * rank  # rank 0: 3 values, rank 1: 4
got = gather_values(values)
assert got.tolist() == [0.0, 1.0, 2.0, 10.0, 11.0, 12.0, 13.0], got
assert float(all_sum(torch.tensor(1.0 + rank))) == 3.0
assert max_over_ranks(5 * rank) == 5
print("ok", rank)
