"""Writes docs/performance.md from docs/claims.json, the one place where the
project's performance figures live:
    python3 docs/gen_performance.py           # rewrite the page
    python3 docs/gen_performance.py --check   # fail if a claim lacks what it
                                              # needs or the page is stale
    python3 docs/gen_performance.py --check --claims FILE   # another claims file
    ... --require-history   # exit 77 (skipped) where the history is not at hand
    python3 docs/gen_performance.py --stray FILE...   # only the check below
The check also fails on a measured figure (FIGURE) in the README or a page
of docs/ outside the page's generated blocks and code blocks: a figure is
stated once, as a claim.
claims.json's "pages" names each topic's page, where a block between two
marker lines (block_marks) gets the topic's current figures.
A claim needs its value, an anchor (name and value, from the same run), the
hardware, date, commit, the command that reproduces it and where its raw
results are: REV:PATH (a commit of this repository's history that holds
them, bench/keep_results.sh), a page of docs/, or "lost: why". Where the
history is at hand (not a shallow clone), each REV:PATH must resolve.
Standard library only."""

import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CLAIMS = os.path.join(HERE, "claims.json")
PAGE = os.path.join(HERE, "performance.md")
ROOT = os.path.dirname(HERE)
RAW_IN_HISTORY = re.compile(r"([0-9a-f]{7,40}):(\S+)")
FIELDS = ("id", "topic", "claim", "value", "hardware", "date", "commit", "command", "raw")


def problems(claims: list) -> list:
    """What each claim lacks, one line each."""
    found, seen = [], set()
    for i, c in enumerate(claims):
        name = c.get("id") or f"claim {i + 1}"
        for field in FIELDS:
            if not str(c.get(field, "")).strip():
                found.append(f"{name}: no {field}")
        anchor = c.get("anchor") or {}
        if not str(anchor.get("name", "")).strip() or not str(anchor.get("value", "")).strip():
            found.append(f"{name}: no anchor (its name and value, from the same run)")
        if c.get("commit") and not re.fullmatch(r"[0-9a-f]{7,40}", c["commit"]):
            found.append(f"{name}: commit {c['commit']!r} is not a hash")
        if c.get("date") and not re.fullmatch(r"\d{4}-\d{2}-\d{2}", c["date"]):
            found.append(f"{name}: date {c['date']!r} is not YYYY-MM-DD")
        raw = str(c.get("raw", ""))
        if raw and not (RAW_IN_HISTORY.fullmatch(raw) or raw.startswith(("docs/", "lost: "))):
            found.append(f"{name}: raw {raw!r} is neither REV:PATH, a page of docs/ "
                         "nor 'lost: why'")
        t = c.get("table")
        if t is not None and not (isinstance(t, dict) and t.get("columns") and all(
                isinstance(r, list) and len(r) == len(t["columns"]) for r in t.get("rows", []))):
            found.append(f"{name}: its table needs columns and rows of as many cells")
        if not isinstance(c.get("notes", []), list):
            found.append(f"{name}: notes must be a list of lines")
        if name in seen:
            found.append(f"{name}: the id is used twice")
        seen.add(name)
    return found


def history_at_hand() -> bool:
    """Whether this checkout has the repository's history (a shallow clone,
    or a tree outside git, has not: its REV:PATH citations go unchecked)."""
    try:
        out = subprocess.run(["git", "-C", ROOT, "rev-parse", "--is-shallow-repository"],
                             capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return False
    return out == "false"


def unresolved(claims: list) -> list:
    """The REV:PATH citations that name nothing in this repository's history."""
    found = []
    for c in claims:
        m = RAW_IN_HISTORY.fullmatch(str(c.get("raw", "")))
        if not m:
            continue
        spec = f"{m.group(1)}:{m.group(2).rstrip('/')}"
        ok = subprocess.run(["git", "-C", ROOT, "cat-file", "-e", spec],
                            capture_output=True).returncode == 0
        if not ok:
            found.append(f"{c['id']}: raw {c['raw']!r}: not in this repository's history")
    return found


def page(claims: list) -> str:
    lines = [
        "# Performance",
        "",
        "Every figure the project states, with its anchor from the same run.",
        "Generated from `docs/claims.json` by `docs/gen_performance.py`: edit the",
        "claims, then run it (CI fails when this page is stale or a claim lacks an",
        "anchor, a command or a commit). How each was measured: the topic pages",
        "(docs/torch.md, docs/sharding.md, docs/ddp.md, ...) and the raw results,",
        "kept in this repository's history, not in its tree: `REV:DIR/` reads",
        "`git show REV:DIR/README.md` (or `git archive REV DIR | tar -x`);",
        "docs/benchmarks.md says how they are kept.",
        "",
    ]
    for topic in sorted({c["topic"] for c in claims}):
        lines += [f"## {topic}", ""]
        lines += ["| claim | value | anchor (same run) | hardware, date | commit |",
                  "|---|---|---|---|---|"]
        for c in claims:
            if c["topic"] != topic:
                continue
            a = c["anchor"]
            lines.append(f"| {c['claim']} [{c['id']}](#{c['id']}) | **{c['value']}** | "
                         f"{a['name']}: {a['value']} | {c['hardware']}, {c['date']} | "
                         f"`{c['commit']}` |")
        lines.append("")
        for c in claims:
            if c["topic"] != topic:
                continue
            lines += [f"### {c['id']}", "",
                      f"- command: `{c['command']}`",
                      f"- raw results: {c['raw']}"]
            if c.get("spread"):
                lines.append(f"- spread: {c['spread']}")
            for note in c.get("notes", []):
                lines.append(f"- {note}")
            lines.append("")
            if c.get("table"):
                t = c["table"]
                lines += ["| " + " | ".join(t["columns"]) + " |",
                          "|" + "---|" * len(t["columns"])]
                lines += ["| " + " | ".join(str(x) for x in row) + " |" for row in t["rows"]]
                lines.append("")
    return "\n".join(lines)


# A measured figure: a number with a decimal point or thousands' commas, or
# any count of microseconds, followed by a unit of time or rate, or a ratio
# (1.5x, 2.3×); or an efficiency "0.93 of one GPU". Whole seconds and
# milliseconds are left alone (settings and limits), and so are sizes (what
# a run moved or held describes the run), and code blocks (a log's lines).
FIGURE = re.compile(
    r"(?<![\w.])(?:\d{1,3}(?:,\d{3})+|\d+\.\d+)(?:[-–]\d[\d,.]*)?\s?"
    r"(?:µs|us|ms|s|GB/s|GiB/s|MB/s|TB/s|%|×|x)(?![\w/])"
    r"|(?<![\w.])\d+(?:[-–]\d+)?\s?µs"
    r"|(?<![\w.])0\.\d{2,3}(?:[-–]0\.\d{2,3})? of (?:one|a single) GPU")


def stray_figures(names: list) -> list:
    """Measured figures on the pages outside their generated blocks: each
    must be a claim (shown in a block) or go; one line each."""
    found = []
    for name in names:
        path = name if os.path.isabs(name) else os.path.join(ROOT, name)
        inside = False
        for n, line in enumerate(open(path).read().split("\n"), 1):
            if line.lstrip().startswith("```"):
                inside = not inside
            elif line.startswith("<!-- figures of "):
                inside = True
            elif line.startswith("<!-- end of the figures of "):
                inside = False
            elif not inside:
                for m in FIGURE.finditer(re.sub(r"`[^`]*`", "", line)):
                    found.append(f"{name}:{n}: {m.group(0)!r} is a measured figure outside "
                                 "the page's generated block: make it a claim in "
                                 "docs/claims.json, or take it out (the history keeps it)")
    return found


def figure_pages() -> list:
    """The README and every page of docs/ but the performance page itself."""
    pages = sorted(f"docs/{n}" for n in os.listdir(HERE)
                   if n.endswith(".md") and n != "performance.md")
    return ["README.md"] + pages


def block_marks(topic: str) -> tuple[str, str]:
    return (f"<!-- figures of {topic}: generated from docs/claims.json by "
            "docs/gen_performance.py; edit the claims, not these lines -->",
            f"<!-- end of the figures of {topic} -->")


def figures(topic: str, claims: list) -> str:
    """A topic page's table of its current figures (each links to its claim)."""
    mine = [c for c in claims if c["topic"] == topic]
    if not mine:
        return ("No figure of this topic is current: none was measured with its anchor "
                "since the claims began (earlier runs: `git show 411ccc3:docs/benchmarks.md`).")
    lines = ["| claim | value | anchor (same run) | hardware, date |", "|---|---|---|---|"]
    for c in mine:
        a = c["anchor"]
        lines.append(f"| {c['claim']} ([{c['id']}](performance.md#{c['id']})) | "
                     f"**{c['value']}** | {a['name']}: {a['value']} | "
                     f"{c['hardware']}, {c['date']} |")
    return "\n".join(lines)


def topic_pages(pages: dict, claims: list) -> tuple[dict, list]:
    """Each topic page's text with its figures block rewritten, and what is wrong."""
    texts, bad = {}, []
    for topic in sorted({c["topic"] for c in claims} - set(pages)):
        bad.append(f"topic {topic!r} has no page in claims.json's \"pages\"")
    for topic, name in sorted(pages.items()):
        path = os.path.join(HERE, name)
        text = texts.get(path) or (open(path).read() if os.path.exists(path) else None)
        begin, end = block_marks(topic)
        if text is None or begin not in text or end not in text:
            bad.append(f"docs/{name} has no figures block for {topic!r}: put the two lines\n"
                       f"    {begin}\n    {end}\n  where its figures go")
            continue
        head, rest = text.split(begin, 1)
        tail = rest.split(end, 1)[1]
        texts[path] = f"{head}{begin}\n{figures(topic, claims)}\n{end}{tail}"
    return texts, bad


def main() -> int:
    args = sys.argv[1:]
    if "--stray" in args:  # only the stray-figure check, on the files named after it
        stray = stray_figures(args[args.index("--stray") + 1:])
        print("gen_performance: " + "\n  ".join(["figures outside the claims:"] + stray)
              if stray else "gen_performance: no figure outside the claims")
        return 1 if stray else 0
    path = args[args.index("--claims") + 1] if "--claims" in args else CLAIMS
    with open(path) as f:
        data = json.load(f)
    claims = data["claims"]
    bad = problems(claims)
    # A claims file without "pages" (the tests' small ones) is checked alone.
    texts, page_problems = topic_pages(data["pages"], claims) if "pages" in data else ({}, [])
    bad += page_problems
    stray = stray_figures(figure_pages()) if "pages" in data else []
    history = history_at_hand()
    if not history and "--require-history" in args:
        print("gen_performance: skipped: the raw results' citations need the repository's "
              "history, and this checkout has none (a shallow clone, or no git)")
        return 77
    if history:
        bad += unresolved(claims)
    if bad:
        print("gen_performance: " + "\n  ".join([f"{path}:"] + bad))
        return 1
    text = page(claims)
    if stray:
        print("gen_performance: " + "\n  ".join(["figures outside the claims:"] + stray))
    if "--check" in args:
        if stray:
            return 1
        current = open(PAGE).read() if os.path.exists(PAGE) else ""
        stale = ["docs/performance.md"] if current != text else []
        stale += [f"docs/{os.path.basename(p)}" for p, t in sorted(texts.items())
                  if open(p).read() != t]
        if stale:
            print(f"gen_performance: {', '.join(stale)} stale: "
                  "run python3 docs/gen_performance.py")
            return 1
        print(f"gen_performance: {len(claims)} claims, each with its anchor, command and commit; "
              + ("their raw results' citations resolve" if history else
                 "their raw results' citations NOT checked: no history here (a shallow clone)"))
        return 0
    with open(PAGE, "w") as f:
        f.write(text)
    for p, t in texts.items():
        with open(p, "w") as f:
            f.write(t)
    print(f"gen_performance: wrote docs/performance.md ({len(claims)} claims) and the figures "
          f"of {len(data.get('pages', {}))} topics in their pages")
    return 1 if stray else 0


if __name__ == "__main__":
    sys.exit(main())
