"""Words/s of `spacy fofe annotate` on Dask with 1 and 2 workers, against nlp.pipe in one
process and nlp.pipe(n_process=2), on the same documents and machine.

The documents are a .spacy corpus's texts repeated to --docs, as JSONL shards. Every figure
is the fastest of --repeats interleaved runs, in wall time from the texts to the annotations,
start-up included (Dask's cluster and each worker's pipeline load; n_process's worker start).
From a worker's rate it estimates the cores needed to annotate a billion words in a day (each
process runs one BLAS thread, so a process is a core). Writes OUT/annotate_scaling.json and
.md, and its section of project/RESULTS.md (--results).

    python scripts/annotate_scaling.py training/conll/model-tuned corpus/conll/train.spacy metrics/annotate
"""

import os

# One BLAS thread per process, as in Dask's workers, so N processes use N cores here too.
for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(variable, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from results import RESULTS, write_section  # noqa: E402

BILLION = 1e9
DAY = 24 * 3600


def write_shards(texts, folder: Path, n_shards: int) -> None:
    folder.mkdir(parents=True)
    per_shard = -(-len(texts) // n_shards)
    for k in range(n_shards):
        with (folder / f"shard{k:03d}.jsonl").open("w", encoding="utf8") as file:
            for i, text in enumerate(texts[k * per_shard:(k + 1) * per_shard]):
                file.write(json.dumps({"id": f"{k}-{i}", "text": text}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model")
    parser.add_argument("corpus", help=".spacy file whose texts are repeated")
    parser.add_argument("out", type=Path)
    parser.add_argument("--docs", type=int, default=50000)
    parser.add_argument("--shards", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=2, help="runs per system; the fastest counts")
    parser.add_argument("--results", default=str(RESULTS), help="the results file whose section this rewrites")
    args = parser.parse_args()

    import spacy

    from spacy_fofe.cli.annotate import annotate
    from spacy_fofe.training.corpus import docbin_docs

    nlp = spacy.load(args.model)
    source = [doc.text for doc in docbin_docs(args.corpus, nlp.vocab) if doc.text.strip()]
    texts = [source[i % len(source)] for i in range(args.docs)]
    words = sum(len(doc) for doc in nlp.tokenizer.pipe(texts))
    rows = []

    def record(system: str, seconds: float, processes: int) -> None:
        rows.append({"system": system, "processes": processes, "seconds": seconds, "words_per_second": words / seconds})
        print(f"{system}: {seconds:.1f} s, {words / seconds:.0f} words/s", flush=True)

    def pipe(n_process: int) -> float:
        start = time.perf_counter()
        for _ in nlp.pipe(texts, batch_size=args.batch_size, n_process=n_process):
            pass
        return time.perf_counter() - start

    def dask(workers: int, output: Path) -> float:
        shutil.rmtree(output, ignore_errors=True)
        start = time.perf_counter()
        summary = annotate(args.model, work / "in", output, workers=workers, batch_size=args.batch_size,
                           progress=False)
        assert summary.docs == len(texts), (summary.docs, len(texts))
        return time.perf_counter() - start

    work = Path(tempfile.mkdtemp(prefix="annotate-scaling-"))
    try:
        write_shards(texts, work / "in", args.shards)
        systems = [(f"nlp.pipe(n_process={n})", n, lambda n=n: pipe(n)) for n in (1, 2)]
        systems += [(f"spacy fofe annotate --workers {w}", w, lambda w=w: dask(w, work / "out")) for w in (1, 2)]
        times = {name: [] for name, _, _ in systems}
        for _ in range(args.repeats):  # interleaved, so a slow spell of the machine hits every system
            for name, _, run in systems:
                times[name].append(run())
                print(f"{name}: {times[name][-1]:.1f} s", flush=True)
        for name, processes, _ in systems:
            record(name, min(times[name]), processes)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    by_name = {row["system"]: row["words_per_second"] for row in rows}
    one, two = by_name["spacy fofe annotate --workers 1"], by_name["spacy fofe annotate --workers 2"]
    per_core = two / 2  # a worker's share of the 2-worker run: what a cluster of such workers gets
    cores = BILLION / DAY / per_core
    report = {"docs": len(texts), "words": words, "shards": args.shards, "rows": rows, "runs_seconds": times,
              "scaling_1_to_2_workers": two / one, "vs_n_process_2": two / by_name["nlp.pipe(n_process=2)"],
              "words_per_second_per_worker": per_core, "cores_for_a_billion_words_a_day": cores}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "annotate_scaling.json").write_text(json.dumps(report, indent=2))
    lines = ["| system | processes | seconds | words/s |", "|---|---:|---:|---:|"]
    lines += [f"| {r['system']} | {r['processes']} | {r['seconds']:.1f} | {r['words_per_second']:.0f} |" for r in rows]
    lines += ["", "Every run's seconds: " + "; ".join(f"{name}: " + ", ".join(f"{t:.1f}" for t in runs)
                                                   for name, runs in times.items())]
    body = (f"{len(texts)} documents ({words} words, {args.shards} JSONL shards) from `{args.corpus}`, "
            f"model `{args.model}`; wall time including start-up, the fastest of {args.repeats} interleaved "
            f"runs per system.\n\n" + "\n".join(lines) + "\n\n"
            f"- 2 workers / 1 worker: {report['scaling_1_to_2_workers']:.2f}x\n"
            f"- 2 workers / `nlp.pipe(n_process=2)`: {report['vs_n_process_2']:.2f}x\n"
            f"- per worker (core) with 2 workers: {per_core:.0f} words/s; a billion words a day "
            f"({BILLION / DAY:.0f} words/s) needs {cores:.2f} such cores, so {math.ceil(cores)}\n")
    (args.out / "annotate_scaling.md").write_text(body)
    write_section("Annotation on Dask", body, command="python scripts/annotate_scaling.py " + " ".join(sys.argv[1:]),
                  path=Path(args.results), raw=args.out / "annotate_scaling.json")
    print(body)


if __name__ == "__main__":
    main()
