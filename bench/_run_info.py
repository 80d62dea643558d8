"""What a result file records about its run: the commit, the date, and the GPU, driver, torch and
pyooc it ran with. Never fails a run: what cannot be found is recorded as unknown."""

import datetime
import os
import subprocess
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def git_commit(root=REPO_ROOT):
    """$OOC_COMMIT when set (gpu-check runs an export of a commit, inside a copy whose .git may be
    stale), else HEAD of the checkout, else "unknown"."""
    if os.environ.get("OOC_COMMIT"):
        return os.environ["OOC_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def nvidia_driver_version():
    try:
        import pynvml
        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else version
    except Exception:
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


def device_info(torch=None):
    """(one-line description, dict of details) of the GPU, torch and pyooc in this run."""
    details = {"python": sys.version.split()[0]}
    try:
        import pyooc
        details["pyooc"] = pyooc.info()
    except Exception as exc:  # report, never fail the run over metadata
        details["pyooc"] = f"unavailable: {exc}"
    if torch is None or not torch.cuda.is_available():
        details["gpu"] = None
        return "no GPU (host backend)", details
    name = torch.cuda.get_device_name()
    driver = nvidia_driver_version()
    props = torch.cuda.get_device_properties(0)
    details.update(gpu=name, driver=driver, torch=torch.__version__, torch_cuda=torch.version.cuda,
                   torch_cudnn=torch.backends.cudnn.version(), gpu_memory_bytes=props.total_memory,
                   multiprocessors=props.multi_processor_count, cpu_count=os.cpu_count())
    return f"{name} (driver {driver})", details
