"""EasyCkpt: asynchronous, crash-safe checkpoints for training code running on OpenDLC.

    import easyckpt

    ckpt = easyckpt.Checkpointer(keep=3)          # dir: env OPENDLC_CKPT_DIR or ./checkpoints
    step, state = ckpt.load_latest() or (0, {"weights": [0.0]})
    ckpt.install_sigterm_handler(lambda: (step, state))
    ...
    ckpt.save(step, state)                        # returns at once; copy and write in background
    ckpt.wait_snapshot()                          # before in-place changes outside torch.optim
    easyckpt.report_progress(step)                # liveness for the platform's hang detection
    ckpt.close()

An elastic job resumes at another world size when its state is data-parallel replicas (the
default, layout="replicated"); layout="sharded" keeps one directory per rank and refuses another
world size with WorldSizeMismatch (easyckpt/world.py). An elastic job that asks to be resized in
place keeps its processes: easyckpt.ElasticGroup re-forms their torch.distributed group
(easyckpt/elastic.py).

Pure Python; PyTorch is used only when the state holds tensors. Never imports Django or Celery.
"""

from easyckpt.checkpointer import Checkpointer, CheckpointWriteError
from easyckpt.elastic import ElasticGroup, Membership
from easyckpt.progress import read_progress, report_progress
from easyckpt.world import WorldSizeMismatch

__all__ = ["Checkpointer", "CheckpointWriteError", "ElasticGroup", "Membership", "WorldSizeMismatch",
           "read_progress", "report_progress"]
