"""Annotation on Dask: output equal to one process, bad records, resuming, killed workers."""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from spacy_fofe.cli.annotate import annotate, doc_record, find_shards, output_paths

SLOW_COMPONENT = '''
import time
from spacy.language import Language


@Language.component("test_slow_down")
def slow_down(doc):
    time.sleep(0.02)
    return doc
'''
TEXTS = ["Ann Lee lives in Toronto .", "The University of Toronto hired Bob .", "Bank of Paris fired Ann Lee .",
         "Nothing to see here .", "Bob visited Paris and Toronto ."]


def write_shards(folder, n_shards=4, per_shard=12, bad=True):
    """JSONL shards of TEXTS, each ending with three bad records (bad JSON, empty line, no text)."""
    folder.mkdir()
    for k in range(n_shards):
        lines = [json.dumps({"id": f"s{k}-{i}", "text": TEXTS[(i + k) % len(TEXTS)]}) for i in range(per_shard)]
        if bad:
            lines += ["{not json", "", json.dumps({"id": "no-text"})]
        (folder / f"shard{k}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf8")
    return folder


def single_process(nlp, shards):
    """{shard name: [doc records]} from nlp.pipe in this process: the reference."""
    key = nlp.get_pipe("fofe_ner").key
    out = {}
    for shard in shards:
        records = [r for r in (_try(line) for line in shard.read_text().splitlines()) if r and "text" in r]
        docs = nlp.pipe([r["text"] for r in records])
        out[shard.stem] = [doc_record(doc, r, key) for doc, r in zip(docs, records)]
    return out


def _try(line):
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        return None


def assert_same_output(output, reference):
    for name, expected in reference.items():
        got = [json.loads(line) for line in (output / f"{name}.jsonl").read_text().splitlines()]
        assert [r["id"] for r in got] == [r["id"] for r in expected], name
        for g, e in zip(got, expected):
            strip = [{k: v for k, v in s.items() if k != "score"} for s in g["spans"]]
            assert strip == [{k: v for k, v in s.items() if k != "score"} for s in e["spans"]], g["id"]
            assert [s["score"] for s in g["spans"]] == pytest.approx([s["score"] for s in e["spans"]], abs=1e-5)
    assert not list(output.glob("*.tmp-*"))


@pytest.fixture(scope="module")
def saved(trained, tmp_path_factory):
    path = tmp_path_factory.mktemp("pipeline") / "model"
    trained.to_disk(path)
    return path


def test_two_workers_write_what_one_process_writes_and_reject_bad_records(trained, saved, tmp_path):
    shards = write_shards(tmp_path / "in")
    summary = annotate(saved, shards, tmp_path / "out", workers=2, batch_size=5, progress=False)
    assert (summary.shards, summary.skipped, summary.docs, summary.rejects) == (4, 0, 48, 12)
    assert summary.words == sum(len(trained.make_doc(TEXTS[(i + k) % 5])) for i in range(12) for k in range(4))
    assert all(result.pipeline_loads == 1 for result in summary.results)  # once per worker, not per shard
    assert_same_output(tmp_path / "out", single_process(trained, find_shards(shards)))
    rejects = [json.loads(line) for line in (tmp_path / "out" / "shard0.rejects.jsonl").read_text().splitlines()]
    assert [(r["line"], r["reason"].split(":")[0]) for r in rejects] == [
        (13, "invalid JSON"), (14, "empty line"), (15, 'no "text" string')]
    again = annotate(saved, shards, tmp_path / "out", workers=1, progress=False)
    assert (again.skipped, again.docs) == (4, 0)  # every shard already has its output


def test_spacy_output_and_plain_text_shards(trained, saved, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "plain.txt").write_text("Ann Lee lives in Toronto .\n\nBob visited Paris .\n", encoding="utf8")
    summary = annotate(saved, folder, tmp_path / "out", workers=1, fmt="spacy", progress=False)
    assert (summary.docs, summary.rejects) == (2, 1)
    from spacy.tokens import DocBin

    docs = list(DocBin().from_disk(tmp_path / "out" / "plain.spacy").get_docs(trained.vocab))
    assert [d.user_data["id"] for d in docs] == ["plain.txt:1", "plain.txt:3"]
    expected = trained("Ann Lee lives in Toronto .")
    assert [(s.start, s.end, s.label_) for s in docs[0].spans["sc"]] == [
        (s.start, s.end, s.label_) for s in expected.spans["sc"]]
    assert docs[0].spans["sc"].attrs["depths"] == expected.spans["sc"].attrs["depths"]


def test_ids_keep_their_json_type_and_other_fields_pass_through(trained, saved, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    records = [{"id": 0, "text": TEXTS[0], "meta": {"source": "a", "page": 3}}, {"id": None, "text": TEXTS[1]},
               {"id": 17, "text": TEXTS[2], "lang": "en"}, {"text": TEXTS[3]}, {"id": "x", "text": TEXTS[4]}]
    (folder / "typed.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf8")
    annotate(saved, folder, tmp_path / "out", workers=1, progress=False)
    got = [json.loads(line) for line in (tmp_path / "out" / "typed.jsonl").read_text().splitlines()]
    assert [r["id"] for r in got] == [0, None, 17, "typed.jsonl:4", "x"]
    assert got[0]["meta"] == {"source": "a", "page": 3} and got[2]["lang"] == "en"
    assert [r["text"] for r in got] == TEXTS
    expected = trained(TEXTS[0])
    assert [s["text"] for s in got[0]["spans"]] == [s.text for s in expected.spans["sc"]]
    annotate(saved, folder, tmp_path / "spacy-out", workers=1, fmt="spacy", progress=False)
    from spacy.tokens import DocBin

    docs = list(DocBin().from_disk(tmp_path / "spacy-out" / "typed.spacy").get_docs(trained.vocab))
    assert [d.user_data["id"] for d in docs] == [0, None, 17, "typed.jsonl:4", "x"]
    assert docs[0].user_data["meta"] == {"source": "a", "page": 3}


def test_a_byte_order_mark_is_dropped_and_a_line_that_is_not_utf8_is_rejected(trained, saved, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "mixed.txt").write_bytes(b"\xef\xbb\xbfAnn Lee lives in Toronto .\r\nM\xfcller visited Paris .\r\n"
                                       b"Bob visited Paris .\r\n")
    summary = annotate(saved, folder, tmp_path / "out", workers=1, progress=False)
    assert (summary.docs, summary.rejects) == (2, 1)
    got = [json.loads(line) for line in (tmp_path / "out" / "mixed.jsonl").read_text().splitlines()]
    assert [r["id"] for r in got] == ["mixed.txt:1", "mixed.txt:3"]
    assert [r["spans"] for r in got] == [doc_record(trained(text), {}, "sc")["spans"]
                                         for text in ("Ann Lee lives in Toronto .", "Bob visited Paris .")]
    rejects = [json.loads(line) for line in (tmp_path / "out" / "mixed.rejects.jsonl").read_text().splitlines()]
    assert [(r["line"], r["reason"], r["record"]) for r in rejects] == [
        (2, "not UTF-8 text (byte 0xfc at character 2)", "M\ufffdller visited Paris .")]


def test_no_shards_clashing_names_and_output_among_the_inputs_are_errors(saved, tmp_path):
    with pytest.raises(ValueError, match="no shards"):
        find_shards(tmp_path)
    (tmp_path / "a.jsonl").write_text("")
    with pytest.raises(ValueError, match="holds input shards"):
        annotate(saved, tmp_path, tmp_path, workers=1, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl"]
    (tmp_path / "a.txt").write_text("")
    with pytest.raises(ValueError, match="same name"):
        find_shards(tmp_path)


def test_a_gpu_that_the_local_workers_cannot_use_is_an_error_before_they_start(saved, tmp_path, monkeypatch):
    monkeypatch.setattr("thinc.util.has_cupy_gpu", False)
    (tmp_path / "a.txt").write_text("Ann Lee visited Paris .\n")
    with pytest.raises(ValueError, match="--gpu-id 0: this machine has no GPU that CuPy can use"):
        annotate(saved, tmp_path / "a.txt", tmp_path / "out", workers=1, gpu_id=0, progress=False)
    assert not (tmp_path / "out").exists()


def test_files_of_the_inputs_that_are_not_shards_are_listed_as_not_read(tmp_path):
    for name in ["b.txt", "a.jsonl", "notes.csv", "c.spacy", "README"]:
        (tmp_path / name).write_text("")
    (tmp_path / "sub.jsonl").mkdir()
    for inputs in [tmp_path, tmp_path / "*"]:
        ignored = []
        assert [p.name for p in find_shards(inputs, ignored)] == ["a.jsonl", "b.txt", "c.spacy"]
        assert [p.name for p in ignored] == ["README", "notes.csv"]
    ignored = []
    assert find_shards(tmp_path / "notes.csv", ignored) == [tmp_path / "notes.csv"] and ignored == []


def slow_pipeline(trained, tmp_path):
    """The trained pipeline plus a component that sleeps per doc (its code in slow.py), so a
    run lasts long enough to be killed in the middle."""
    code = tmp_path / "slow.py"
    code.write_text(SLOW_COMPONENT)
    spec = importlib.util.spec_from_file_location("slow", code)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    trained.add_pipe("test_slow_down", first=True)
    try:
        trained.to_disk(tmp_path / "slow-model")
    finally:
        trained.remove_pipe("test_slow_down")
    return tmp_path / "slow-model", code


@pytest.mark.slow
def test_a_worker_killed_in_the_middle_of_a_shard_loses_and_duplicates_nothing(trained, tmp_path):
    from dask.distributed import Client, LocalCluster

    model, code = slow_pipeline(trained, tmp_path)
    shards = write_shards(tmp_path / "in", n_shards=6, per_shard=20, bad=False)
    output = tmp_path / "out"
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with Client(cluster) as client:
            pids = list(client.run(os.getpid).values())
            run = threading.Thread(target=annotate, args=(model, shards, output),
                                   kwargs={"scheduler": cluster.scheduler_address, "code": str(code),
                                           "progress": False})
            run.start()
            deadline = time.time() + 60
            while not list(output.glob("*.tmp-*")) and time.time() < deadline:
                time.sleep(0.05)
            assert list(output.glob("*.tmp-*")), "no shard started"
            os.kill(pids[0], signal.SIGKILL)  # a shard is half written; the nanny restarts the worker
            run.join(timeout=120)
            assert not run.is_alive()
    assert_same_output(output, single_process(trained, find_shards(shards)))


@pytest.mark.slow
def test_a_killed_run_resumes_where_it_stopped(trained, tmp_path):
    model, code = slow_pipeline(trained, tmp_path)
    shards = write_shards(tmp_path / "in", n_shards=6, per_shard=20, bad=False)
    output = tmp_path / "out"
    command = [sys.executable, "-m", "spacy", "fofe", "annotate", str(model), str(shards), str(output),
               "--workers", "2", "--code", str(code)]
    run = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 90
    while not list(output.glob("*.jsonl")) and time.time() < deadline:
        time.sleep(0.05)
    os.killpg(run.pid, signal.SIGKILL)  # the run and its workers, in the middle
    run.wait()
    finished = [s for s in find_shards(shards) if output_paths(s, output, "jsonl")[0].exists()]
    assert 0 < len(finished) < 6, "the kill should land in the middle of the run"
    summary = annotate(model, shards, output, workers=2, code=str(code), progress=False)
    assert summary.skipped == len(finished) and summary.docs == 20 * (6 - len(finished))
    assert_same_output(output, single_process(trained, find_shards(shards)))
