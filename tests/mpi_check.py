"""Whether MPI can run here, asked without initialising MPI in the test process.

`import mpi4py.MPI` initialises MPI (a singleton job) in whatever process runs it; MPICH then
keeps a /dev/shm/mpich_shm_<pid> segment until MPI_Finalize, which a pytest worker that is
killed or exits without atexit never calls, and a forked child that exits normally finalises
the parent's MPI under it. So the tests ask a short-lived interpreter instead, once per run.
"""
import functools
import subprocess
import sys

from gpucomm.bench.backends import mpiexec

_PROBE = ("import mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI; "
          "MPI.Get_library_version()")


@functools.lru_cache(maxsize=1)
def mpi_missing() -> str | None:
    """Why MPI jobs cannot run here (mpi4py, its MPI library or mpiexec missing), or None."""
    p = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                       timeout=60)
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["?"])[-1]
        return f"mpi4py or its MPI library is missing ({last}); pip install mpi4py mpich"
    if mpiexec() is None:
        return "no mpiexec (pip install mpich provides one)"
    return None
