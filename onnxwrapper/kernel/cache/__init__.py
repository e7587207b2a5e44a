"""The compile cache: a content-addressed store of artifact folders shared by processes
(:class:`ArtifactCache`: its entries, size bound and defences against other local users), and
replacing or removing files that another process may be using.
"""

from __future__ import annotations

from onnxwrapper.kernel.cache._cache import ArtifactCache
from onnxwrapper.kernel.cache._cache_entry import (CacheEntry, ENV_CACHE_DIR, ENV_CACHE_MAX_BYTES, FORMAT_VERSION,
                                                   RACY_SECONDS, crc32_file, default_cache_dir, hash_file, make_key,
                                                   prune_records)
from onnxwrapper.kernel.cache._files_in_use import remove_tree, replace_files

__all__ = [
    "ArtifactCache",
    "CacheEntry",
    "ENV_CACHE_DIR",
    "ENV_CACHE_MAX_BYTES",
    "FORMAT_VERSION",
    "RACY_SECONDS",
    "crc32_file",
    "default_cache_dir",
    "hash_file",
    "make_key",
    "prune_records",
    "remove_tree",
    "replace_files",
]
