"""Runs the DDP example under torchrun on 2 processes with an exact-match tolerance.
Exits 77 (skipped) when torch or the built sncl_torch extension is missing.
  run_torch_ddp.py <ddp_train.py>"""
import socket
import subprocess
import sys

try:
    import torch  # noqa: F401
    import sncl_torch  # noqa: F401
except ImportError as e:
    print(f"SKIP: needs torch and the built sncl_torch extension on PYTHONPATH: {e}")
    sys.exit(77)

# A free port rather than --standalone's fixed 29400, which concurrent jobs may hold.
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--redirects", "1", "--tee", "1",
       "--master_addr", "127.0.0.1", "--master_port", str(port), sys.argv[1], "--steps", "10", "--rtol", "0"]
sys.exit(subprocess.run(cmd, timeout=240).returncode)
