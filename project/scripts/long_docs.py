"""Words/s and peak memory of a trained pipeline against a document's length and against n.

Every case runs in a fresh process (peak RSS is per process; one thread and the benchmark's STEADY_MEMORY),
on the sentences of a .spacy corpus repeated as needed (tokenization is not timed):
- length: L tokens annotated as ONE doc, and the same tokens as the sentence-sized docs they
  came as (nlp.pipe), for each L in --lengths. Their words/s ratio is what a user pays for
  not splitting a document; both should grow linearly.
- n: fofe_ner's max_length set to each of --ns (the model scores fragments of any length),
  on --n-tokens tokens of sentence docs.
Writes OUT/long_docs.json, OUT/long_docs.md and OUT/long_docs.png, and its section of
project/RESULTS.md (--results).

    python scripts/long_docs.py training/conll/model-tuned corpus/conll/test.spacy metrics/long-docs
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from benchmark import ONE_THREAD, STEADY_MEMORY
from results import RESULTS, write_section


def sentences(nlp, corpus: str, n_tokens: int):
    """(words, spaces) of the corpus's docs, cycled until they hold n_tokens tokens (the last cut).

    Each sentence ends with a space, so the sentences joined are the one-doc text.
    """
    from spacy_fofe.training.corpus import docbin_docs

    source = [([t.text for t in doc], [bool(t.whitespace_) for t in doc[:-1]] + [True])
              for doc in docbin_docs(corpus, nlp.vocab) if len(doc)]
    if not source:
        raise SystemExit(f"{corpus} holds no tokens")
    out, total = [], 0
    while total < n_tokens:
        words, spaces = source[len(out) % len(source)]
        out.append((words[: n_tokens - total], spaces[: n_tokens - total]))
        total += len(out[-1][0])
    return out


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(model: str, corpus: str, mode: str, n_tokens: int, max_length: int, repeats: int) -> dict:
    """One case in this process: words/s (best of `repeats`), spans found, and peak RSS."""
    import spacy
    from spacy.tokens import Doc

    nlp = spacy.load(model)
    if max_length:
        nlp.get_pipe("fofe_ner").cfg["max_length"] = max_length
    parts = sentences(nlp, corpus, n_tokens)

    def make_docs():
        if mode == "one doc":
            return [Doc(nlp.vocab, words=[w for ws, _ in parts for w in ws], spaces=[s for _, ss in parts for s in ss])]
        return [Doc(nlp.vocab, words=ws, spaces=ss) for ws, ss in parts]

    list(nlp.pipe([Doc(nlp.vocab, words=ws, spaces=ss) for ws, ss in parts[:50]]))  # warm-up
    before = peak_mb()
    best, n_spans = float("inf"), 0
    for _ in range(repeats):
        docs = make_docs()
        start = time.perf_counter()
        docs = list(nlp.pipe(docs))
        best = min(best, time.perf_counter() - start)
        n_spans = sum(len(doc.spans[nlp.get_pipe("fofe_ner").key]) for doc in docs)
        del docs
    return {"mode": mode, "tokens": n_tokens, "max_length": max_length or nlp.get_pipe("fofe_ner").cfg["max_length"],
            "seconds": best, "words_per_sec": n_tokens / best, "spans": n_spans,
            "rss_after_load_mb": before, "peak_rss_mb": peak_mb()}


def run_case(args, mode: str, n_tokens: int, max_length: int) -> dict:
    # Small cases take a fraction of a second: repeat them enough for a steady best time.
    repeats = 1 if n_tokens > 100_000 else min(20, max(3, 100_000 // n_tokens))
    command = [sys.executable, __file__, "--case", args.model, args.corpus, mode, str(n_tokens), str(max_length),
               str(repeats)]
    # One thread and the memory of a long-running process, as the benchmark times: without them a long doc's new
    # arrays can stall on huge-page compaction, which times the kernel's memory instead of the model.
    out = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **ONE_THREAD, **STEADY_MEMORY})
    if out.returncode != 0:
        raise SystemExit(f"case {mode} {n_tokens} tokens n={max_length} failed:\n{out.stderr[-3000:]}")
    row = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"  {mode:>9} {n_tokens:>9} tokens  n={row['max_length']:<2} {row['words_per_sec']:>8.0f} words/s  "
          f"peak {row['peak_rss_mb']:>6.0f} MB  {row['spans']} spans", flush=True)
    return row


def write_reports(rows, out: Path, command: str, model: str, results: Path) -> None:
    (out / "long_docs.json").write_text(json.dumps({"command": command, "rows": rows}, indent=2))
    by = {(r["mode"], r["tokens"]): r for r in rows if r["sweep"] == "length"}
    lines = ["| tokens | one doc words/s | sentence docs words/s | ratio | one doc peak MB | "
             "sentence docs peak MB |", "|---|---|---|---|---|---|"]
    for tokens in sorted({t for _, t in by}):
        one, split = by[("one doc", tokens)], by[("sentences", tokens)]
        lines.append(f"| {tokens:,} | {one['words_per_sec']:.0f} | {split['words_per_sec']:.0f} | "
                     f"{one['words_per_sec'] / split['words_per_sec']:.2f} | {one['peak_rss_mb']:.0f} | "
                     f"{split['peak_rss_mb']:.0f} |")
    lines += ["", "| n | words/s | peak MB | spans |", "|---|---|---|---|"]
    for r in sorted((r for r in rows if r["sweep"] == "n"), key=lambda r: r["max_length"]):
        lines.append(f"| {r['max_length']} | {r['words_per_sec']:.0f} | {r['peak_rss_mb']:.0f} | {r['spans']} |")
    (out / "long_docs.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    body = (f"fofe_ner alone in the pipeline `{model}`; text: the test docs repeated. Words/s and peak RSS of one "
            "document of each length against the same tokens as sentence docs (each case in a fresh process; "
            "ratio = one doc / sentence docs), then against n on sentence docs. Plot: "
            f"`{(out / 'long_docs.png').as_posix()}`.\n\n" + "\n".join(lines))
    write_section("Long documents", body, command=command, path=results, raw=out / "long_docs.json")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install 'spacy-fofe[bench]'): no plot")
        return
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for mode in ("one doc", "sentences"):
        pts = sorted((t, r) for (m, t), r in by.items() if m == mode)
        axes[0][0].plot([t for t, _ in pts], [r["words_per_sec"] for _, r in pts], marker="o", label=mode)
        axes[1][0].plot([t for t, _ in pts], [r["peak_rss_mb"] for _, r in pts], marker="o", label=mode)
    n_rows = sorted((r for r in rows if r["sweep"] == "n"), key=lambda r: r["max_length"])
    axes[0][1].plot([r["max_length"] for r in n_rows], [r["words_per_sec"] for r in n_rows], marker="o")
    axes[1][1].plot([r["max_length"] for r in n_rows], [r["peak_rss_mb"] for r in n_rows], marker="o")
    for ax in axes[0][0], axes[1][0]:
        ax.set_xscale("log")
        ax.set_xlabel("tokens")
        ax.legend()
    for ax in axes[0][1], axes[1][1]:
        ax.set_xlabel("n (max_length)")
    for ax in axes[0]:
        ax.set_ylabel("words/s")
    for ax in axes[1]:
        ax.set_ylabel("peak RSS (MB)")
    fig.tight_layout()
    fig.savefig(out / "long_docs.png", dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a trained pipeline with fofe_ner")
    parser.add_argument("corpus", help=".spacy file whose docs give the text")
    parser.add_argument("out", help="folder for long_docs.json / .md / .png")
    parser.add_argument("--lengths", default="100,1000,10000,100000,1000000", help="doc lengths in tokens")
    parser.add_argument("--ns", default="1,3,5,7,9,11,13,15", help="values of max_length for the n sweep")
    parser.add_argument("--n-tokens", type=int, default=50000, help="tokens per case of the n sweep")
    parser.add_argument("--results", default=str(RESULTS), help="the results file whose section this rewrites")
    if len(sys.argv) > 1 and sys.argv[1] == "--case":
        model, corpus, mode, n_tokens, max_length, repeats = sys.argv[2:]
        print(json.dumps(measure(model, corpus, mode, int(n_tokens), int(max_length), int(repeats))))
        return
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    print("Document length (each case in a fresh process):", flush=True)
    for tokens in [int(t) for t in args.lengths.split(",")]:
        for mode in ("one doc", "sentences"):
            rows.append({"sweep": "length", **run_case(args, mode, tokens, 0)})
    print(f"n, on {args.n_tokens} tokens of sentence docs:", flush=True)
    for n in [int(n) for n in args.ns.split(",")]:
        rows.append({"sweep": "n", **run_case(args, "sentences", args.n_tokens, n)})
    write_reports(rows, out, "python scripts/long_docs.py " + " ".join(sys.argv[1:]), args.model, Path(args.results))


if __name__ == "__main__":
    main()
