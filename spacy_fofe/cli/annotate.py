"""Annotate many documents with a pipeline on a Dask cluster (a local one, or a scheduler's).

Work is split by input shard: each shard is one task, whose output is written under a
temporary name and renamed when complete. So a shard's output exists only when it is whole,
a rerun skips the shards that have one, and a task retried after its worker died starts
from scratch and leaves nothing behind. Each worker process loads the pipeline once.

Shards: JSON lines with a "text" field (and optionally "id"), plain text with one document
per line (.txt), or .spacy files, UTF-8. A bad record (invalid JSON, no "text", an empty line,
bytes that are not UTF-8) goes to the shard's rejects file with its line number and never stops
the run.
"""

import glob
import json
import os
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple, Union

from .text_files import text_lines

SHARD_SUFFIXES = (".jsonl", ".txt", ".spacy")
FORMATS = ("jsonl", "spacy")


@dataclass
class ShardResult:
    """What one task did: the shard, counts, seconds, and which worker process ran it."""

    shard: str
    docs: int = 0
    words: int = 0
    rejects: int = 0
    seconds: float = 0.0
    worker: str = ""
    pipeline_loads: int = 0  # pipelines loaded in that worker process so far


@dataclass
class Summary:
    shards: int = 0
    skipped: int = 0
    docs: int = 0
    words: int = 0
    rejects: int = 0
    seconds: float = 0.0
    per_worker: Dict[str, float] = field(default_factory=dict)  # worker -> seconds of work
    ignored: List[Path] = field(default_factory=list)  # files of the inputs without a shard suffix, not read
    results: List[ShardResult] = field(default_factory=list)

    @property
    def words_per_second(self) -> float:
        return self.words / self.seconds if self.seconds else 0.0


def find_shards(inputs: Union[str, Path], ignored: Optional[List[Path]] = None) -> List[Path]:
    """The shards of a folder (every file with a shard suffix) or a glob pattern, sorted.

    ignored: extended with the other files the folder or pattern holds, which are not read.
    """
    path = Path(inputs)
    if path.is_dir():
        files = [p for p in path.iterdir() if p.is_file()]
    elif path.is_file():
        files = [path]
    else:
        files = [Path(p) for p in glob.glob(str(inputs)) if Path(p).is_file()]
    is_shard = [p.suffix in SHARD_SUFFIXES or p == path for p in files]
    shards = [p for p, shard in zip(files, is_shard) if shard]
    if ignored is not None:
        ignored.extend(sorted(p for p, shard in zip(files, is_shard) if not shard))
    if not shards:
        raise ValueError(f"{inputs}: no shards ({', '.join(SHARD_SUFFIXES)} files) found")
    names = Counter(p.stem for p in shards)
    clashes = [name for name, n in names.items() if n > 1]
    if clashes:
        raise ValueError(f"shards {clashes} have the same name with different suffixes: their outputs would clash")
    return sorted(shards)


def output_paths(shard: Path, output: Path, fmt: str) -> Tuple[Path, Path]:
    """Where a shard's annotations and its rejects go."""
    return output / f"{shard.stem}.{fmt}", output / f"{shard.stem}.rejects.jsonl"


def annotate(
    pipeline: str,
    inputs: Union[str, Path],
    output: Union[str, Path],
    *,
    workers: int = 2,
    scheduler: Optional[str] = None,
    batch_size: int = 256,
    gpu_id: int = -1,
    fmt: str = "jsonl",
    code: Optional[str] = None,
    progress: bool = True,
) -> Summary:
    """Annotate every shard of `inputs` that has no output in `output` yet, on Dask.

    scheduler: the address of a running Dask scheduler; without it a LocalCluster of
    `workers` single-threaded processes is started (and closed at the end).
    """
    from dask.distributed import Client, as_completed
    from thinc.util import has_cupy_gpu

    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
    if gpu_id >= 0 and scheduler is None and not has_cupy_gpu:  # the local workers would each fail on it
        raise ValueError(f"--gpu-id {gpu_id}: this machine has no GPU that CuPy can use")
    output = Path(output)
    ignored: List[Path] = []
    shards = find_shards(inputs, ignored)
    if any(shard.parent.resolve() == output.resolve() for shard in shards):
        raise ValueError(f"{output} holds input shards: write the annotations to another folder")
    output.mkdir(parents=True, exist_ok=True)
    pending = [s for s in shards if not output_paths(s, output, fmt)[0].exists()]
    for leftover in output.glob("*.tmp-*"):  # from a run that was stopped
        leftover.unlink()
    summary = Summary(shards=len(shards), skipped=len(shards) - len(pending), ignored=ignored)
    if not pending:
        return summary
    start = time.perf_counter()
    cluster = None if scheduler else local_cluster(workers)
    client = Client(scheduler or cluster)
    bar = _progress_bar(len(pending)) if progress else None
    try:
        futures = client.map(annotate_shard, [str(s) for s in pending], pipeline=str(pipeline), output=str(output),
                             batch_size=batch_size, gpu_id=gpu_id, fmt=fmt, code=code, pure=False)
        for future in as_completed(futures):
            result = future.result()
            summary.results.append(result)
            summary.docs += result.docs
            summary.words += result.words
            summary.rejects += result.rejects
            summary.per_worker[result.worker] = summary.per_worker.get(result.worker, 0.0) + result.seconds
            if bar is not None:
                bar.update(1)
                bar.set_postfix(docs=summary.docs, rejects=summary.rejects)
    finally:
        if bar is not None:
            bar.close()
        client.close()
        if cluster is not None:
            cluster.close()
    for leftover in output.glob("*.tmp-*"):  # from tasks whose worker died; they were run again
        leftover.unlink()
    summary.seconds = time.perf_counter() - start
    return summary


def local_cluster(workers: int):
    """A LocalCluster of single-threaded worker processes.

    Dask starts workers with MALLOC_TRIM_THRESHOLD_=65536, which makes glibc map and unmap
    every large array: it halves the speed of fofe_ner's many short-lived arrays. The
    workers here keep glibc's default (an existing cluster needs the same setting: README).
    """
    import dask
    from dask.distributed import LocalCluster

    with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}):
        return LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None)


def _progress_bar(total: int):
    try:
        from tqdm import tqdm
    except ImportError:  # the bar is optional; the summary is printed anyway
        return None
    return tqdm(total=total, unit="shard", desc="annotate")


_loads = Counter()


@lru_cache(maxsize=2)
def _load(pipeline: str, gpu_id: int, code: Optional[str]):
    """The pipeline, loaded once per worker process (tasks run in the same process reuse it)."""
    import spacy

    from .app import import_code, setup_gpu

    import_code(code)
    setup_gpu(gpu_id, silent=True)
    _loads[pipeline] += 1
    return spacy.load(pipeline)


def annotate_shard(shard: str, *, pipeline: str, output: str, batch_size: int = 256, gpu_id: int = -1,
                   fmt: str = "jsonl", code: Optional[str] = None) -> ShardResult:
    """Annotate one shard; its output and rejects appear under their names only when complete."""
    start = time.perf_counter()
    nlp = _load(pipeline, gpu_id, code)
    shard_path = Path(shard)
    out_path, rejects_path = output_paths(shard_path, Path(output), fmt)
    result = ShardResult(shard=shard, worker=f"{os.uname().nodename}:{os.getpid()}")
    records, rejects = read_shard(shard_path, nlp)
    token = uuid.uuid4().hex
    tmp_out, tmp_rejects = (path.with_name(f"{path.name}.tmp-{token}") for path in (out_path, rejects_path))
    key = _spans_key(nlp)
    texts = ((text, fields) for fields, text in records)
    annotated = _counted(nlp.pipe(texts, batch_size=batch_size, as_tuples=True), result)
    if fmt == "jsonl":
        with tmp_out.open("w", encoding="utf8") as file:
            file.writelines(json.dumps(doc_record(doc, fields, key), ensure_ascii=False) + "\n"
                            for doc, fields in annotated)
    else:
        from spacy.tokens import DocBin

        doc_bin = DocBin(store_user_data=True)
        for doc, fields in annotated:
            doc.user_data.update((name, value) for name, value in fields.items() if name != "text")
            doc_bin.add(doc)
        doc_bin.to_disk(tmp_out)
    with tmp_rejects.open("w", encoding="utf8") as file:
        for reject in rejects:
            file.write(json.dumps(reject, ensure_ascii=False) + "\n")
    result.rejects = len(rejects)
    os.replace(tmp_rejects, rejects_path)
    os.replace(tmp_out, out_path)  # last: the output's existence marks the shard done
    result.seconds = time.perf_counter() - start
    result.pipeline_loads = _loads[pipeline]
    return result


def _counted(annotated, result: ShardResult):
    """Pass (doc, record fields) pairs through, counting docs and words into `result`."""
    for doc, fields in annotated:
        result.docs += 1
        result.words += len(doc)
        yield doc, fields


def _spans_key(nlp) -> Optional[str]:
    for name in nlp.pipe_names:
        if nlp.get_pipe_meta(name).factory == "fofe_ner":
            return nlp.get_pipe(name).key
    return None


def doc_record(doc, fields: dict, spans_key: Optional[str]) -> dict:
    """The record's fields as given (its "id" of any JSON type, its text, anything else) and the doc's
    annotations under "spans": every span of every level with its label, score and depth (fofe_ner's
    group), else the entities; character and token offsets."""
    if spans_key is not None and spans_key in doc.spans:
        group = doc.spans[spans_key]
        scores = group.attrs.get("scores") or [None] * len(group)
        depths = group.attrs.get("depths") or [0] * len(group)
        items = list(zip(group, scores, depths))
    else:
        items = [(ent, None, 0) for ent in doc.ents]
    spans = [{"start": s.start_char, "end": s.end_char, "token_start": s.start, "token_end": s.end,
              "label": s.label_, "text": s.text, "score": score, "depth": int(depth)} for s, score, depth in items]
    return {**fields, "spans": spans}


def read_shard(path: Path, nlp) -> Tuple[Iterator[Tuple[dict, str]], List[dict]]:
    """(fields, text) of every good record of a shard, read as they are consumed, and the list the
    bad records (shard, line, reason, record) are added to on the way. The fields are the record's
    own, its "id" as given; a record without one gets "SHARD:LINE" (a .spacy doc: "SHARD:INDEX")."""
    rejects: List[dict] = []

    def records() -> Iterator[Tuple[dict, str]]:
        if path.suffix == ".spacy":
            from ..training.corpus import docbin_docs

            for i, doc in enumerate(docbin_docs(path, nlp.vocab)):
                yield {"id": doc.user_data.get("id", f"{path.name}:{i}")}, doc.text
            return
        for number, line, not_utf8 in text_lines(path):
            reason, record = (not_utf8, None) if not_utf8 else _parse(line, path.suffix)
            if reason is not None:
                rejects.append({"shard": path.name, "line": number, "reason": reason, "record": line})
            else:
                yield {"id": f"{path.name}:{number}", **record}, record["text"]

    return records(), rejects


def _parse(line: str, suffix: str) -> Tuple[Optional[str], Optional[dict]]:
    if not line.strip():
        return "empty line", None
    if suffix == ".txt":
        return None, {"text": line}
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        return f"invalid JSON: {err.msg} at column {err.colno}", None
    if not isinstance(record, dict):
        return f"not a JSON object but {type(record).__name__}", None
    if not isinstance(record.get("text"), str):
        return "no \"text\" string", None
    if not record["text"].strip():
        return "empty text", None
    return None, record
