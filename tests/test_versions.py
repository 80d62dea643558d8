"""Readable versions and the check that the cuDNN loaded is not older than the one built against."""

import pyooc
from pyooc import _versions


def test_cuda_versions_read_as_people_write_them():
    assert _versions.cuda_version_string(13000) == "13.0"
    assert _versions.cuda_version_string(12080) == "12.8"
    assert _versions.cuda_version_string(0).startswith("none")
    assert pyooc.info()["cuda_runtime"].count(".") == 1 or pyooc.info()["cuda_runtime"].startswith("none")


def test_an_older_cudnn_loaded_is_reported_with_what_to_do():
    message = _versions.cudnn_older_than_built((92801, 92400))
    assert "built against cuDNN 9.28.1 but cuDNN 9.24.0 is loaded" in message
    assert "pip install 'nvidia-cudnn-cu13>=9.28.1'" in message
    assert _versions.cudnn_older_than_built((92400, 92801)) is None  # newer is fine
    assert _versions.cudnn_older_than_built((92801, 92801)) is None


def test_info_has_the_effective_budget_not_none():
    details = pyooc.info()
    assert isinstance(details["memory_limit"], int) and details["memory_limit"] > 0
    assert ("cudnn_warning" in details) == (_versions.cudnn_older_than_built() is not None)
