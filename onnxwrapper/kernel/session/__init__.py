"""What a backend session answers as ONNX Runtime would: the one feed validator (ORT's errors),
run plans, the NaN/±Inf screen of FP16 targets, partition reports (with warnings attributed to the
user's call), the ``SessionOptions`` calls ORT cannot report back, and ORT's own errors for the
calls a backend serves itself; onnxruntime's telemetry, off unless the user turns it on.
"""

from __future__ import annotations

from onnxwrapper.kernel.session._feeds import (check_input, check_output_names, feed_signature, numpy_to_ort_type,
                                               ort_type_to_numpy, validate_feed, validate_ort_values)
from onnxwrapper.kernel.session._nonfinite import NonFiniteInputCheck, NonFiniteInputWarning, first_nonfinite
from onnxwrapper.kernel.session._ort_answers import assignment_not_enabled_error, check_providers
from onnxwrapper.kernel.session._ort_telemetry import ENV_ORT_TELEMETRY, ort_telemetry_wanted, quiet_ort_telemetry
from onnxwrapper.kernel.session._partition import (NodeAssignment, PartialOffloadWarning, PartitionReport, known_reason,
                                                   user_stacklevel)
from onnxwrapper.kernel.session._run_plans import RunPlans, call_key, plannable, screened_plan
from onnxwrapper.kernel.session._session_options import (RECORDED_METHODS, RecordingSessionOptions, fix_free_dimensions,
                                                         free_dimension_overrides, record_call, recorded_calls,
                                                         recorded_key, replay_calls, supplied_external_data)

__all__ = [
    "ENV_ORT_TELEMETRY",
    "NodeAssignment",
    "NonFiniteInputCheck",
    "NonFiniteInputWarning",
    "PartialOffloadWarning",
    "PartitionReport",
    "RECORDED_METHODS",
    "RecordingSessionOptions",
    "RunPlans",
    "assignment_not_enabled_error",
    "call_key",
    "check_input",
    "check_output_names",
    "check_providers",
    "feed_signature",
    "first_nonfinite",
    "fix_free_dimensions",
    "free_dimension_overrides",
    "known_reason",
    "numpy_to_ort_type",
    "ort_telemetry_wanted",
    "ort_type_to_numpy",
    "plannable",
    "quiet_ort_telemetry",
    "record_call",
    "recorded_calls",
    "recorded_key",
    "replay_calls",
    "screened_plan",
    "supplied_external_data",
    "user_stacklevel",
    "validate_feed",
    "validate_ort_values",
]
