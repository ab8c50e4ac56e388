"""``python -m fxls.worker``: the zygote.

Before anything else is imported, the control channel (the pipes on fds 0 and 1) moves to
private descriptors, fd 0 becomes /dev/null and fd 1 a copy of fd 2 (the server's log pipe),
so nothing torch or user code prints can ever reach the control channel. Thread pools are
limited to one thread before torch is imported (OpenMP after fork hangs children).
"""

import os
import sys


def _detach_control_channel() -> tuple[int, int]:
    ctl_in = os.dup(0)
    ctl_out = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[name] = "1"
    return ctl_in, ctl_out


if __name__ == "__main__":
    _ctl_in, _ctl_out = _detach_control_channel()

    from fxls.worker.process.zygote import main

    sys.exit(main(_ctl_in, _ctl_out, sys.argv[1:]))
