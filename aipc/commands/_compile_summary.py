"""The summary ``aipc compile`` prints: the files written, the target, the partition (with the CPU
nodes and the recovery the compile took), patches, accuracy and profile, step timings."""

from __future__ import annotations

import os

__all__ = ["format_summary"]


def _size(path: str | None) -> str:
    if not path or not os.path.exists(path):
        return "-"
    n = os.path.getsize(path)
    return f"{n / 1e6:.2f} MB" if n >= 1e5 else f"{n / 1e3:.1f} KB"


def format_summary(s: dict) -> str:
    """The text summary of the ``aipc compile`` record ``s`` (what ``--json`` prints)."""
    c = s["compile"]
    lines = [f"compiled {s['model']} ({s['precision']}) in {sum(s['seconds'].values()):.1f} s",
             f"  {c['ctx']}  {_size(c['ctx'])}"]
    for path in c.get("bins") or ([c["bin"]] if c.get("bin") else []):
        lines.append(f"  {path}  {_size(path)}")
    if s.get("quantization"):
        lines.append(f"  {s['quantization']['path']}  {_size(s['quantization']['path'])}  (QDQ model)")
    for d in s.get("dlc") or ():
        lines.append(f"  {d['path']}  {_size(d['path'])}  (DLC)")
    for u in (s.get("quantization") or {}).get("opset_upgrades", ()):
        lines.append(f"opset {u['from']} → {u['to']} (in memory, by {u['by']}): {'; '.join(u['reasons'])}")
    if s.get("quantization"):
        lines.append(s["quantization"]["fragile_text"])
    ep = c["ep_options"]
    target = ", ".join(f"{k}={ep[k]}" for k in ("soc_model", "htp_arch", "enable_htp_fp16_precision") if k in ep)
    lines.append("target: " + (target if "soc_model" in ep else f"fp32 simulation (no soc_model) {target}").strip())
    lines.append(f"partition: {c['partition_summary']}")
    steps = c["partition"].get("recovery") or ()
    if steps:  # the compile as given failed: what the recovery ladder tried (docs/backends/qnn.md)
        lines.append("recovery: " + " → ".join(
            f"{r['rung']}{' (' + r['detail'] + ')' if r.get('detail') else ''} {r['result']}"
            + (f" [{r['error']}]" if r.get("error") else "") for r in steps))
    for n in c["partition"]["nodes"]:
        if n["ep"] != c["partition"]["target_ep"]:
            lines.append(f"  CPU  {n['name']} ({n['op_type']}): {n.get('reason') or ''}")
    if s["patches"]:
        lines.append(f"patches applied: {len(s['patches'])}")
        lines += [f"  {p['node_name'] or '(unnamed)'}: {p['summary']}" for p in s["patches"]]
    if s.get("accuracy_text"):
        lines.append(s["accuracy_text"])
    prof = s.get("profile")
    if prof:
        lines.append(f"profile ({prof['executions']} runs, {prof['note']}):")
        for row in prof["ops"][:15]:
            lines.append(f"  {row['node']:<40} {row['op_type']:<12} {row['mean_cycles']:>12.0f} cycles "
                         f"{row['share'] * 100:5.1f} %")
        lines.append(f"  QNN execute time per run (µs): {', '.join(f'{t:.0f}' for t in prof['execute_us'])}")
    lines.append("steps: " + ", ".join(f"{k} {v:.2f} s" for k, v in s["seconds"].items()))
    lines += [f"note: {n}" for n in s["notes"]]
    return "\n".join(lines)
