"""``fastmath info`` as tables, with rich when it is installed (the ``cli`` extra).

Without rich the plain-text rendering of :func:`fastmath.tools._info.render` is printed. Keys
this module does not lay out specially are shown in a last table, so what ``info()``
gains later is never hidden.
"""
from __future__ import annotations

_LAID_OUT = ("fastmath", "python", "platform", "versions", "backends", "compiled", "threads",
             "selection", "config", "settings", "cpu", "gpus", "thread_pools", "openblas_spin",
             "processes")


def show_info(d: dict, file=None) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        from ._info import render

        print(render(d), file=file)
        return
    console = Console(file=file, highlight=False)
    from ._info import processes_shown, shown, spin_shown

    def pairs(title, rows):
        t = Table(title=title, title_justify="left", show_header=False, box=None,
                  padding=(0, 2, 0, 0))
        t.add_column(style="bold")
        t.add_column()
        for k, v in rows:
            t.add_row(str(k), str(v))
        console.print(t)
        console.print()

    cpu, gpus = d["cpu"], d["gpus"]
    console.print(f"[bold]fastmath {d['fastmath']}[/bold]  python {d['python']}  "
                  f"{d['platform']}\n")
    pairs("Machine", [
        ("CPU", f"{cpu['model']} ({cpu['arch']})"),
        ("SIMD", f"{cpu['simd']}  (numpy dispatches: {', '.join(cpu['simd_targets']) or '-'})"),
        ("cores", f"{cpu['usable_cores']} usable of {cpu['logical_cores']}"),
        ("threads", ", ".join(f"{k} {v}" for k, v in d["thread_pools"].items())),
        ("openblas spin", spin_shown(d["openblas_spin"])),
        ("processes", processes_shown(d["processes"])),
        ("GPUs", "; ".join(f"cuda:{g['index']} {g['name']} {g['memory_gib']} GiB "
                           f"(sm {g['capability']})" for g in gpus["devices"]) or gpus["note"]),
    ])

    t = Table(title="Backends", title_justify="left")
    t.add_column("backend", style="bold")
    t.add_column("status")
    for name, status in d["backends"].items():
        ok = status == "available"
        mark = "[green]available[/green]" if ok else f"[yellow]not available[/yellow]: {status}"
        if name == d["selection"]["backend"]:
            mark += "  [bold](selected)[/bold]"
        t.add_row(name, mark)
    console.print(t)
    console.print()

    t = Table(title="Compiled", title_justify="left")
    t.add_column("extension", style="bold")
    t.add_column("status")
    for name, status in d["compiled"].items():
        t.add_row(name, "[green]built[/green]" if status == "built"
                  else f"[yellow]{status}[/yellow]")
    console.print(t)
    console.print()

    t = Table(title="Settings", title_justify="left")
    t.add_column("setting", style="bold")
    t.add_column("value", overflow="fold")  # a path is shown whole, over several lines
    t.add_column("from", style="dim", overflow="fold")
    t.add_row("selection", d["selection"]["backend"], d["selection"]["source"])
    for name, s in d.get("settings", {}).items():
        t.add_row(name, shown(name, s["value"]), s["source"])
    env = d["config"].get("environment") or {}
    t.add_row("environment", ", ".join(f"{k}={v}" for k, v in env.items()) or "no FASTMATH_* set",
              "")
    console.print(t)
    console.print()
    pairs("Versions", [(k, v or "[dim]not installed[/dim]") for k, v in d["versions"].items()])
    rest = [(k, v) for k, v in d.items() if k not in _LAID_OUT]
    if rest:
        pairs("More", rest)
