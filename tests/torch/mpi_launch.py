"""Runs a test script under mpirun: torch.distributed reads RANK, WORLD_SIZE
and LOCAL_RANK, which Open MPI names otherwise (MASTER_ADDR and MASTER_PORT
come from mpirun -x)."""

import os
import runpy
import sys

os.environ["RANK"] = os.environ["OMPI_COMM_WORLD_RANK"]
os.environ["WORLD_SIZE"] = os.environ["OMPI_COMM_WORLD_SIZE"]
os.environ["LOCAL_RANK"] = os.environ["OMPI_COMM_WORLD_LOCAL_RANK"]
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
