"""The compile cache: a content-addressed store of artifact folders shared by processes
(:class:`ArtifactCache`: its entries, size bound and defences against other local users),
replacing or removing files that another process may be using, and reading files named from
elsewhere (regular files only, bounded).
"""

from __future__ import annotations

from onnxwrapper.kernel.cache._cache import ArtifactCache
from onnxwrapper.kernel.cache._cache_entry import (CacheEntry, ENV_CACHE_DIR, ENV_CACHE_MAX_BYTES, FORMAT_VERSION,
                                                   RACY_SECONDS, crc32_file, default_cache_dir, hash_file, make_key,
                                                   prune_records)
from onnxwrapper.kernel.cache._cache_safety import write_private_file
from onnxwrapper.kernel.cache._files_in_use import remove_tree, replace_files
from onnxwrapper.kernel.cache._regular_files import NotRegularFileError, open_regular, read_regular

__all__ = [
    "ArtifactCache",
    "CacheEntry",
    "ENV_CACHE_DIR",
    "ENV_CACHE_MAX_BYTES",
    "FORMAT_VERSION",
    "NotRegularFileError",
    "RACY_SECONDS",
    "crc32_file",
    "default_cache_dir",
    "hash_file",
    "make_key",
    "open_regular",
    "prune_records",
    "read_regular",
    "remove_tree",
    "replace_files",
    "write_private_file",
]
