"""4 ranks, DeviceMesh dp=2 x tp=2 on Gloo: DDP over dp plus explicit collectives and p2p on each
group. Every op's tensor size says which group it belongs to (see SIZES), so a test can check
commprof's process-group attribution against ground truth without trusting commprof."""

import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.nn.parallel import DistributedDataParallel

# numel of the tensors each group moves (DDP's single bucket on dp: 7*5 + 5 = 40 floats)
SIZES = {"mesh_tp": (111, 55, 77, 88, 12), "mesh_dp": (222, 66, 99, 40, 14), "default_pg": (333,)}
STEPS = int(os.environ.get("STEPS", "6"))


def main() -> None:
    if os.environ.get("HANG_DUMP_S"):  # a hung test prints every rank's stacks, then fails
        import faulthandler

        faulthandler.dump_traceback_later(float(os.environ["HANG_DUMP_S"]), exit=True)
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    tp, dp = mesh.get_group("tp"), mesh.get_group("dp")
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(7, 5), process_group=dp)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    tp_rank, dp_rank = dist.get_rank(tp), dist.get_rank(dp)
    tp_peer = dist.get_global_rank(tp, 1 - tp_rank)
    for _ in range(STEPS):
        dist.all_reduce(torch.ones(111), group=tp)
        dist.all_reduce(torch.ones(222), group=dp)
        dist.all_reduce(torch.ones(333))
        work = dist.all_reduce(torch.ones(111), group=tp, async_op=True)
        work.wait()
        dist.broadcast(torch.ones(88), src=dist.get_global_rank(tp, 0), group=tp)
        out = torch.empty(2 * 99)
        dist.all_gather_into_tensor(out, torch.ones(99), group=dp)
        dist.reduce_scatter_tensor(torch.empty(6), torch.ones(12), group=tp)
        dist.all_to_all_single(torch.empty(14), torch.ones(14), group=dp)
        # p2p: the lower rank of each pair sends first
        if tp_rank == 0:
            dist.send(torch.ones(55), dst=tp_peer, group=tp)
        else:
            dist.recv(torch.empty(55), src=tp_peer, group=tp)
        if dp_rank == 0:
            dist.recv(torch.empty(66), group_src=1 - dp_rank, group=dp)
        else:
            dist.send(torch.ones(66), group_dst=1 - dp_rank, group=dp)
        ops = [dist.P2POp(dist.isend, torch.ones(77), tp_peer, tp),
               dist.P2POp(dist.irecv, torch.empty(77), tp_peer, tp)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        dist.barrier(group=tp)
        loss = model(torch.randn(3, 7)).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
    # all ranks leave together, and DDP goes before its group: tearing down at different moments
    # hangs Gloo now and then (seen without commprof too)
    dist.barrier()
    del model, opt
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
