"""What the qnn backend knows of a model before compiling it: its identity (the model key of cache
keys and provenance records) and its recorded facts, its specializations (:class:`Signature`:
fixed shapes, bound control inputs, folded ``If`` nodes), its dim groups and their shape buckets
(:class:`DimGroups`, :class:`Padding`), and what a feed may cost before a
specialization is compiled for it.
"""

from __future__ import annotations

from onnxwrapper.backends.qnn.model._dim_groups import DimGroups, Linear, inferred_merges, parse_dim
from onnxwrapper.backends.qnn.model._feed_limits import (DEFAULT_MAX_FEED_MB, VTCM_BUDGET_MB, check_feed_cost,
                                                         check_feed_rows)
from onnxwrapper.backends.qnn.model._model_identity import (facts_of, is_epcontext_model, model_key,
                                                            remember_facts, session_cache_key, stored_facts,
                                                            structure_key)
from onnxwrapper.backends.qnn.model._padding import RULE_CANDIDATES, GroupRule, Padding, bucket_size
from onnxwrapper.backends.qnn.model._specialize import (Signature, control_inputs, control_value, signature_of,
                                                        specialize_for_qnn)

__all__ = [
    "DEFAULT_MAX_FEED_MB",
    "DimGroups",
    "GroupRule",
    "Linear",
    "Padding",
    "RULE_CANDIDATES",
    "Signature",
    "VTCM_BUDGET_MB",
    "bucket_size",
    "check_feed_cost",
    "check_feed_rows",
    "control_inputs",
    "control_value",
    "facts_of",
    "inferred_merges",
    "is_epcontext_model",
    "model_key",
    "parse_dim",
    "remember_facts",
    "session_cache_key",
    "signature_of",
    "specialize_for_qnn",
    "stored_facts",
    "structure_key",
]
