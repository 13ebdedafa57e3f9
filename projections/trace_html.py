"""A self-contained HTML rendering of an erasure trace, for compliance records.

One file, inline CSS, no scripts and no external resources (fonts, images, links to
fetch), so it can be archived or mailed and opens the same everywhere. Every value
from the report is escaped with ``html.escape``. Elements carry stable ``id`` and
``data-*`` attributes (``request``, ``stores``, ``store-<name>``, ``verdict``) so that
tests and scripts can read a report back.
"""

from __future__ import annotations

from html import escape

from projections.trace import StoreTrace, TraceReport, log_position, rebuilt_note

_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2rem; color: #1b1f23; }
h1 { font-size: 1.3rem; margin-bottom: .2rem; }
h2 { font-size: 1.05rem; margin: 1.2rem 0 .2rem; }
table { border-collapse: collapse; margin: 1rem 0; }
th, td { border: 1px solid #d0d7de; padding: .3rem .6rem; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
code { font-family: ui-monospace, monospace; font-size: .92em; }
.status, .verdict { font-weight: 600; padding: .05rem .4rem; border-radius: .3rem; }
.applied, .complete { background: #dafbe1; color: #116329; }
.pending { background: #fff8c5; color: #7d4e00; }
.failed { background: #ffebe9; color: #a40e26; }
.reported { background: #ddf4ff; color: #0550ae; }
p.note { color: #57606a; max-width: 60rem; }
"""

_NOTE = (
    "Probes are live checks made when this report was produced. By memory id: copies of the erased memories "
    "(any copy fails the store). By content fingerprint: copies of identical text under any id, which other, "
    "unerased memories may hold; a copy of an erased memory is also found by id. Latency: seconds from the "
    "request to the store's receipt; for a store rebuilt after the request, to the receipt of the version that "
    "held the copies."
)


def _v(value: object) -> str:
    """An escaped cell value; ``-`` for None."""
    return "-" if value is None else escape(str(value), quote=True)


def _store_row(s: StoreTrace) -> str:
    status = escape(s.status, quote=True)
    return (
        f'<tr id="store-{_v(s.store)}" data-store="{_v(s.store)}" data-status="{status}">'
        f"<td>{_v(s.store)}</td>"
        f'<td><span class="status {status}">{status}</span></td>'
        f"<td>{_v(s.applied_at)}</td>"
        f'<td class="num">{_v(s.log_partition)}</td>'
        f'<td class="num">{_v(s.log_offset)}</td>'
        f'<td class="num">{_v(s.items_removed)}</td>'
        f'<td class="num">{_v(s.latency_s)}</td>'
        f'<td data-probe="id">{_v(s.probe)}</td>'
        f'<td data-probe="fingerprint">{_v(s.fingerprint_probe)}</td>'
        "</tr>"
    )


def _earlier(report: TraceReport) -> list[str]:
    """The earlier versions the request left (``id="earlier"``), or a note that it left none."""
    if not report.earlier_versions:
        what = "erased with the request" if report.with_history else "none"
        return [f'<p id="earlier" class="note" data-earlier="0">Earlier versions of the erased memories: {what}.</p>']
    rows = [
        f'<tr data-memory="{_v(v.memory_id)}" data-holds-content="{str(v.holds_content).lower()}">'
        f"<td><code>{_v(v.memory_id)}</code></td><td>{_v(v.status)}</td>"
        f"<td>{'yes' if v.holds_content else 'no'}</td><td>{'yes' if v.reinstated else 'no'}</td></tr>"
        for v in report.earlier_versions
    ]
    return [
        "<h2>Earlier versions not erased by this request</h2>",
        f'<table id="earlier" data-earlier="{len(rows)}"><thead><tr><th>Memory</th><th>Status now</th>',
        "<th>Holds content</th><th>Reinstated (its replacement was erased)</th></tr></thead><tbody>",
        *rows,
        "</tbody></table>",
    ]


def _rivals(report: TraceReport) -> list[str]:
    """The claims the request reinstated because it erased their last rival
    (``id="rivals"``); nothing when it reinstated none."""
    if not report.rivals_reinstated:
        return []
    rows = [
        f'<tr data-memory="{_v(r.memory_id)}" data-holds-content="{str(r.holds_content).lower()}">'
        f"<td><code>{_v(r.memory_id)}</code></td><td>{_v(r.status)}</td>"
        f"<td>{'yes' if r.holds_content else 'no'}</td></tr>"
        for r in report.rivals_reinstated
    ]
    return [
        "<h2>Claims reinstated because their last rival was erased</h2>",
        f'<table id="rivals" data-rivals="{len(rows)}"><thead><tr><th>Memory</th><th>Status now</th>',
        "<th>Holds content</th></tr></thead><tbody>",
        *rows,
        "</tbody></table>",
    ]


def render_html(report: TraceReport) -> str:
    """The report as one HTML5 document (UTF-8, no external resources)."""
    request_rows = [
        ("Request id", report.request_id),
        ("Subject", report.subject_id),
        ("Kind", report.request_kind),
        *([("Source", report.source_ref)] if report.source_ref else []),
        ("Memories", f"{len(report.memory_ids)}: {', '.join(report.memory_ids)}"),
        ("Requested by", report.requested_by),
        ("Reason", report.reason),
        ("Legal basis", report.legal_basis),
        ("Requested at (UTC)", report.requested_at),
        ("Log position", log_position(report)),
    ]
    verdict = escape(report.verdict, quote=True)
    rebuilt = [s for s in report.stores if s.rebuilt]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>Erasure trace {_v(report.request_id)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>Erasure trace <code>{_v(report.request_id)}</code></h1>",
        f'<p>Verdict: <span id="verdict" class="verdict {verdict}" data-verdict="{verdict}">{verdict}</span></p>',
        '<table id="request"><tbody>',
        *(f"<tr><th>{escape(k)}</th><td>{_v(v)}</td></tr>" for k, v in request_rows),
        "</tbody></table>",
        '<table id="stores"><thead><tr>',
        "<th>Store</th><th>Status</th><th>Applied at (UTC)</th><th>Partition</th><th>Offset</th>",
        "<th>Items removed</th><th>Latency (s)</th><th>Probe by memory id</th><th>Probe by content fingerprint</th>",
        "</tr></thead><tbody>",
        *(_store_row(s) for s in report.rows()),
        "</tbody></table>",
        *(f'<p class="note" data-rebuilt="{_v(s.store)}">{_v(rebuilt_note(s))}</p>' for s in rebuilt),
        *_earlier(report),
        *_rivals(report),
        f'<p class="note">{escape(_NOTE)}</p>',
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"
