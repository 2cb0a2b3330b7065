"""Search benchmark: index build time, query latency (p50/p99) and throughput, as ratios to the raw library.

    python benchmarks/search_bench.py --out build/bench/search [--small]

Measures, on generated 12-word documents (100k by default):
- raw tantivy (the floor: its own English tokenizer and query parser, stored
  fields fetched per hit) and raw bm25s (the alternative library);
- the embedded backend: bm25 (at full size), dense and hybrid (document
  vectors are pseudo-random unit vectors standing in for MiniLM, so dense
  latency is the matrix search alone; MiniLM's own encode cost is measured
  on a subset and reported separately);
- the Elasticsearch backend on the noida-db emulator (labelled `emulator`):
  bm25 at full size, dense and hybrid on a subset;
- queries per second one at a time with 1 and 2 processes (embedded bm25);
- BM25 parity between the two backends (overlap@10, 1,000 docs, 50 queries).
Every figure is written to OUT/results.json with the resolved config.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import multiprocessing as mp
import os
import platform
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import bm25s  # noqa: E402
import numpy as np  # noqa: E402
import Stemmer  # noqa: E402
import tantivy  # noqa: E402

from librarian.search import EmbeddedIndex, MiniLMEmbedder  # noqa: E402
from librarian.search.emulator import start_emulator  # noqa: E402
from librarian.search.es_index import ElasticsearchIndex  # noqa: E402
from librarian.search.es_settings import ElasticsearchSettings  # noqa: E402
from librarian.search.synthetic import make_corpus, overlap_at_k  # noqa: E402

log = logging.getLogger("search_bench")
K = 10


class RandomUnitEmbedder:
    """A deterministic pseudo-random unit vector per text: MiniLM's shape at a fraction of its cost."""

    name = "random-unit-384"
    dim = 384

    def encode(self, texts):
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
            out[i] = np.random.default_rng(seed).standard_normal(self.dim, dtype=np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def latencies_ms(fn, queries) -> dict[str, float]:
    times = []
    for q in queries:
        t = time.perf_counter()
        fn(q)
        times.append(time.perf_counter() - t)
    arr = np.array(times) * 1000
    return {"p50_ms": float(np.percentile(arr, 50)), "p99_ms": float(np.percentile(arr, 99)),
            "qps": float(len(arr) / (arr.sum() / 1000))}


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


# ----- raw libraries
def raw_tantivy(nodes):
    b = tantivy.SchemaBuilder()
    b.add_text_field("id", stored=True, tokenizer_name="raw")
    b.add_text_field("path", stored=True, tokenizer_name="raw")
    b.add_text_field("kind", stored=True, tokenizer_name="raw")
    b.add_text_field("text", stored=True, tokenizer_name="en_stem")
    schema = b.build()
    index = tantivy.Index(schema)
    writer = index.writer(heap_size=128_000_000, num_threads=1)
    for n in nodes:
        writer.add_document(tantivy.Document(id=n.id, path=n.path, kind=n.kind, text=n.text))
    writer.commit()
    index.reload()
    searcher = index.searcher()

    def search(q):
        query, _ = index.parse_query_lenient(q, ["text"])
        hits = searcher.search(query, limit=K, count=False).hits
        return [(score, searcher.doc(addr).to_dict()) for score, addr in hits]

    return search


def raw_bm25s(nodes):
    stemmer = Stemmer.Stemmer("english")
    tokens = bm25s.tokenize([n.text for n in nodes], stopwords="en", stemmer=stemmer, show_progress=False)
    retriever = bm25s.BM25()
    retriever.index(tokens, show_progress=False)
    records = [(n.id, n.path, n.kind, n.text) for n in nodes]

    def search(q):
        qt = bm25s.tokenize([q], stopwords="en", stemmer=stemmer, show_progress=False)
        docs, scores = retriever.retrieve(qt, k=K, show_progress=False, n_threads=1)
        return [(float(s), records[int(d)]) for d, s in zip(docs[0], scores[0], strict=True)]

    return search


# ----- throughput with several processes (each builds its own index: nothing shared across a fork)
def _qps_worker(n_docs, n_queries, seed, seconds, barrier, results):
    corpus = make_corpus(n_docs, n_queries, words_per_doc=12, seed=seed)
    index = EmbeddedIndex("qps")
    index.upsert(corpus.nodes)
    index.refresh()
    barrier.wait()
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        index.search(corpus.queries[done % len(corpus.queries)], k=K)
        done += 1
    results.put(done / (time.perf_counter() - start))


def qps_processes(n_proc, n_docs, n_queries, seed, seconds) -> float:
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(n_proc), ctx.Queue()
    procs = [ctx.Process(target=_qps_worker, args=(n_docs, n_queries, seed, seconds, barrier, results))
             for _ in range(n_proc)]
    for p in procs:
        p.start()
    total = sum(results.get(timeout=600) for _ in procs)
    for p in procs:
        p.join()
    return total


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="folder for results.json")
    parser.add_argument("--small", action="store_true", help="quick run: 5k docs, fewer queries")
    parser.add_argument("--docs", type=int, default=None)
    parser.add_argument("--queries", type=int, default=None)
    parser.add_argument("--dense-subset", type=int, default=None, help="docs in the Elasticsearch dense index")
    parser.add_argument("--es-queries", type=int, default=30,
                        help="queries timed on the emulator (it scans: about 0.03 ms per document per query)")
    parser.add_argument("--bm25-only", action="store_true",
                        help="only the BM25 figures (raw libraries, embedded, processes): a quick check on a busy machine")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--qps-seconds", type=float, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("elastic_transport").setLevel(logging.WARNING)

    n_docs = args.docs or (5_000 if args.small else 100_000)
    n_queries = args.queries or (200 if args.small else 1_000)
    dense_subset = args.dense_subset or (2_000 if args.small else 10_000)
    qps_seconds = args.qps_seconds or (2.0 if args.small else 5.0)
    config = {"docs": n_docs, "queries": n_queries, "k": K, "words_per_doc": 12, "seed": args.seed,
              "es_dense_subset_docs": dense_subset, "es_queries": args.es_queries, "qps_seconds": qps_seconds, "cpus": os.cpu_count(),
              "python": platform.python_version(), "bm25_only": args.bm25_only,
              "load_average_at_start": os.getloadavg()[0]}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    r: dict = {"config": config, "notes": []}

    log.info("generating %d documents and %d queries", n_docs, n_queries)
    corpus = make_corpus(n_docs, n_queries, words_per_doc=12, seed=args.seed)
    queries = corpus.queries

    log.info("raw tantivy")
    search, r["raw_bm25_build_s"] = timed(lambda: raw_tantivy(corpus.nodes))
    lat = latencies_ms(search, queries)
    r.update(raw_bm25_p50_ms=lat["p50_ms"], raw_bm25_p99_ms=lat["p99_ms"], raw_bm25_qps_1proc=lat["qps"])

    log.info("raw bm25s")
    search, r["raw_bm25s_build_s"] = timed(lambda: raw_bm25s(corpus.nodes))
    lat = latencies_ms(search, queries[: min(200, len(queries))])
    r.update(raw_bm25s_p50_ms=lat["p50_ms"], raw_bm25s_p99_ms=lat["p99_ms"], raw_bm25s_qps_1proc=lat["qps"])

    log.info("embedded backend, bm25")
    def build_bm25():
        index = EmbeddedIndex("bench")
        index.upsert(corpus.nodes)
        index.refresh()
        return index
    embedded, r["embedded_bm25_build_s"] = timed(build_bm25)
    lat = latencies_ms(lambda q: embedded.search(q, k=K), queries)
    r.update(embedded_bm25_p50_ms=lat["p50_ms"], embedded_bm25_p99_ms=lat["p99_ms"],
             embedded_bm25_qps_1proc=lat["qps"])
    r["embedded_vs_raw_bm25_p50_ratio"] = r["embedded_bm25_p50_ms"] / r["raw_bm25_p50_ms"]
    embedded = None  # free it before the next build

    if args.bm25_only:
        log.info("queries per second, 1 and 2 processes")
        r["embedded_bm25_qps_1proc_loop"] = qps_processes(1, n_docs, n_queries, args.seed, qps_seconds)
        r["embedded_bm25_qps_2proc"] = qps_processes(2, n_docs, n_queries, args.seed, qps_seconds)
        return _finish(r, out)

    log.info("embedded backend, dense and hybrid (random unit vectors, %d docs)", n_docs)
    def build_dense():
        index = EmbeddedIndex("bench-dense", RandomUnitEmbedder())
        index.upsert(corpus.nodes)
        index.refresh()
        return index
    dense_index, r["embedded_dense_build_s"] = timed(build_dense)
    for mode in ("dense", "hybrid"):
        lat = latencies_ms(lambda q, m=mode: dense_index.search(q, k=K, mode=m), queries[:200])
        r[f"embedded_{mode}_p50_ms"], r[f"embedded_{mode}_p99_ms"] = lat["p50_ms"], lat["p99_ms"]
    dense_index = None
    r["notes"].append("dense/hybrid document vectors are pseudo-random 384-d unit vectors (MiniLM's shape); "
                      "MiniLM costs are reported separately as minilm_*")

    log.info("MiniLM encode cost (subset)")
    minilm = MiniLMEmbedder()
    _, r["minilm_load_s"] = timed(lambda: minilm.encode(["warm up"]))
    subset = [n.text for n in corpus.nodes[:300]]
    _, seconds = timed(lambda: minilm.encode(subset))
    r["minilm_docs_per_s"] = len(subset) / seconds
    lat = latencies_ms(lambda q: minilm.encode([q]), queries[:50])
    r["minilm_query_encode_p50_ms"] = lat["p50_ms"]

    log.info("queries per second, 1 and 2 processes")
    r["embedded_bm25_qps_1proc_loop"] = qps_processes(1, n_docs, n_queries, args.seed, qps_seconds)
    r["embedded_bm25_qps_2proc"] = qps_processes(2, n_docs, n_queries, args.seed, qps_seconds)

    with tempfile.TemporaryDirectory() as tmp, start_emulator(Path(tmp) / "data") as emulator:
        settings = ElasticsearchSettings(url=emulator.url, request_timeout=120, max_retries=2)
        log.info("Elasticsearch backend on the noida-db emulator at %s", emulator.url)
        def build_es():
            index = ElasticsearchIndex("bench-bm25", None, settings)
            index.upsert(corpus.nodes)
            index.refresh()
            return index
        es, r["es_emulator_bm25_build_s"] = timed(build_es)
        es_queries = queries[: args.es_queries]
        lat = latencies_ms(lambda q: es.search(q, k=K), es_queries)
        r.update(es_emulator_bm25_p50_ms=lat["p50_ms"], es_emulator_bm25_p99_ms=lat["p99_ms"],
                 es_emulator_bm25_qps_1proc=lat["qps"])
        emb = EmbeddedIndex("cmp")
        emb.upsert(corpus.nodes)
        emb.refresh()
        r["parity_overlap_at_10_full"] = float(np.mean(
            [overlap_at_k([h.id for h in emb.search(q)], [h.id for h in es.search(q)]) for q in es_queries]))
        es.drop()
        emb = None

        log.info("Elasticsearch dense and hybrid on %d docs", dense_subset)
        es_dense = ElasticsearchIndex("bench-dense", RandomUnitEmbedder(), settings)
        _, r["es_emulator_dense_build_s"] = timed(lambda: (es_dense.upsert(corpus.nodes[:dense_subset]),
                                                         es_dense.refresh()))
        for mode in ("dense", "hybrid"):
            lat = latencies_ms(lambda q, m=mode: es_dense.search(q, k=K, mode=m), es_queries)
            r[f"es_emulator_{mode}_p50_ms"], r[f"es_emulator_{mode}_p99_ms"] = lat["p50_ms"], lat["p99_ms"]
        es_dense.drop()

        log.info("BM25 parity, 1,000 docs and 50 queries")
        small = make_corpus(1000, 50, words_per_doc=(5, 40), seed=11)
        a, b = EmbeddedIndex("parity"), ElasticsearchIndex("bench-parity", None, settings)
        for index in (a, b):
            index.upsert(small.nodes)
            index.refresh()
        r["parity_overlap_at_10"] = float(np.mean(
            [overlap_at_k([h.id for h in a.search(q)], [h.id for h in b.search(q)]) for q in small.queries]))
        b.drop()
    r["notes"].append("es_emulator_* figures are from noida-db, an Elasticsearch-API emulator, not Elasticsearch")
    return _finish(r, out)


def _finish(r: dict, out: Path) -> dict:
    r["targets"] = {"embedded_vs_raw_bm25_p50_ratio<=2": r["embedded_vs_raw_bm25_p50_ratio"] <= 2.0,
                    "embedded_bm25_qps_1proc>=5000": r["embedded_bm25_qps_1proc"] >= 5000}
    if "parity_overlap_at_10" in r:
        r["targets"]["parity_overlap_at_10>=0.9"] = r["parity_overlap_at_10"] >= 0.9
    r["load_average_at_end"] = os.getloadavg()[0]
    (out / "results.json").write_text(json.dumps(r, indent=1))
    for key, value in r.items():
        if key not in ("config", "notes"):
            print(f"{key}: {value:.4g}" if isinstance(value, float) else f"{key}: {value}")
    print(f"wrote {out / 'results.json'}")
    return r


if __name__ == "__main__":
    main()
