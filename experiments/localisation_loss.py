"""Experiment (not shipped): a span-level cross-entropy that makes the inserted paraphrase outscore its sub-spans.

Continues from the shipped slice-minilm with a fresh LoRA (r = 16), batch 16, AdamW with warm-up and linear decay,
no dropout; logits are SCALE × (cosine − the phrase scorer's costs) over every span of 1..20 words of a passage, the
target is the inserted sentence's span. ANCHOR > 0 adds ANCHOR × the mean token cosine distance to the frozen
start model. Evaluates the even (selection) and odd (held-out) dev rows with both scorers and STS-B dev.

It builds its passages with ``slice_st.data.contexts.on_topic_contexts``, which was removed from the library
afterwards (measured not to help distillation; see docs/results.md): run it on commit 12fcd76, e.g.
``git worktree add /tmp/at 12fcd76 && ANCHOR=20 PYTHONPATH=/tmp/at python experiments/localisation_loss.py
runs/localise 200 1e-4 20 1 100 --eval0`` (arguments: OUT STEPS LR SCALE USE_COSTS EVAL_EVERY; the data folder
is ``$DATA``, default ``data`` in the working directory).
"""

import json
import os
import random
import sys
import time

import numpy as np
import torch

from slice_st import load_model
from slice_st.config import enable_span_features
from slice_st.data import read_stsb_context
from slice_st.data.contexts import _context_pool, _sts_pairs, on_topic_contexts
from slice_st.data.passages import evaluation_sentences
from slice_st.evaluation import SpanRetrievalEvaluator
from slice_st.scoring import query_profiles, resolve_scorer, span_costs, unit_flags
from slice_st.spans import prefix_sums, span_sum_norms
from slice_st.tokens import unit_boundaries
from slice_st.training.trainer import sts_evaluator

out, steps, lr, scale, use_costs = (
    sys.argv[1],
    int(sys.argv[2]),
    float(sys.argv[3]),
    float(sys.argv[4]),
    sys.argv[5] == "1",
)
anchor = float(os.environ.get("ANCHOR", "0"))
torch.manual_seed(0)
random.seed(0)
D = os.environ.get("DATA", "data")
DEV = f"{D}/stsb_context/stsb-context-dev.tsv"
STS = f"{D}/stsbenchmark/sts-dev.csv"
os.makedirs(out, exist_ok=True)
log = open(f"{out}/log.jsonl", "a")
model = load_model()
enable_span_features(model)
cache = os.path.join(out, "pairs.json")
if os.path.exists(cache):
    data = json.load(open(cache))
else:
    excluded = evaluation_sentences([DEV, STS])

    def norm(t):
        return " ".join(t.lower().split())

    pairs = [
        (a, b)
        for a, b, s, src in _sts_pairs(D, ("stsb", "sick"))
        if s >= 0.8
        and norm(a) not in excluded
        and norm(b) not in excluded
        and a.strip()
        and b.strip()
        and len(b.split()) <= 20
    ]
    random.Random(0).shuffle(pairs)
    pool = [
        t
        for t in dict.fromkeys(_context_pool(D, [p[0] for p in pairs] + [p[1] for p in pairs]))
        if norm(t) not in excluded and 3 <= len(t.split()) <= 30
    ]
    ctx = on_topic_contexts([p[1] for p in pairs], pool, load_model("base"), avoid=[p[0] for p in pairs], seed=0)
    data = [dict(query=a, passage=c.text, start=c.start, end=c.end) for (a, b), c in zip(pairs, ctx)]
    json.dump(data, open(cache, "w"))
print("pairs", len(data), flush=True)
model.add_adapter(__import__("peft").LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear"))
params = [p for p in model.parameters() if p.requires_grad]
opt = torch.optim.AdamW(params, lr=lr)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10) * max(0.0, 1 - s / steps))
scorer = resolve_scorer("phrase")
K = 20


def features(texts):
    return model.preprocess(texts)


def units_of(feat, out_):
    return unit_boundaries(out_["attention_mask"], out_.get("special_tokens_mask"), out_.get("offset_mapping"), "word")


def evaluate(step):
    model.eval()
    rows = read_stsb_context(DEV)
    res = {"step": step}
    with torch.no_grad():
        for sc in ("phrase", "max-cosine"):
            for part, start in (("even", 0), ("odd", 1)):
                sub = rows.select(range(start, len(rows), 2))
                m = SpanRetrievalEvaluator.from_dataset(sub, setups=("single",), scorer=sc, write_csv=False)(model)
                res[f"{sc}_{part}"] = {
                    k.replace("single_", ""): round(float(v) * (100 if "spear" in k or "pear" in k else 1), 2)
                    for k, v in m.items()
                }
        res["sts_dev"] = round(100 * float(sts_evaluator(STS)(model)["sts-dev_spearman_cosine"]), 2)
    model.eval()  # no dropout: the anchor compares with the frozen model
    print(json.dumps(res), flush=True)
    log.write(json.dumps(res) + "\n")
    log.flush()


evaluate(0) if "--eval0" in sys.argv else None
model.eval()
B = 16
order = list(range(len(data)))
random.Random(1).shuffle(order)
t0 = time.time()
for step in range(1, steps + 1):
    batch = [data[order[(step * B + i) % len(order)]] for i in range(B)]
    qf = features([b["query"] for b in batch])
    pf = features([b["passage"] for b in batch])
    qo = model(qf)
    po = model(pf)
    qu = units_of(qf, qo)
    pu = units_of(pf, po)
    # query vectors: mean of unit tokens
    te = qo["token_embeddings"]
    bnd = qu.boundaries
    first = bnd[:, 0]
    last = bnd.gather(1, qu.num_units[:, None])[:, 0]
    pos = torch.arange(te.shape[1])[None, :]
    mask = ((pos >= first[:, None]) & (pos < last[:, None])).float()[..., None]
    qv = (te * mask).sum(1) / mask.sum(1).clamp(min=1)
    qv = torch.nn.functional.normalize(qv, dim=-1)
    emb = po["token_embeddings"]
    pb = pu.boundaries
    nu = pu.num_units
    width = pb.shape[1] - 1
    up = torch.gather(prefix_sums(emb), 1, pb[..., None].expand(-1, -1, emb.shape[-1]))  # (B, U+1, d)
    dp = (up * qv[:, None, :]).sum(-1)  # (B, U+1)
    norms = span_sum_norms(emb, pb, nu, 1, K)  # (B, U, K) nan missing
    logits = torch.full((B, width, K), float("-inf"))
    costs = None
    if use_costs:
        flags = torch.zeros(B, width, dtype=torch.long)
        cs, ce = pu.char_starts, pu.char_ends
        for r, b in enumerate(batch):
            n = int(nu[r])
            flags[r, :n] = torch.from_numpy(
                unit_flags([b["passage"][int(cs[r, i]) : int(ce[r, i])] for i in range(n)]).astype(np.int64)
            )
        qlen = qu.num_units.tolist()
        prof = torch.from_numpy(query_profiles([b["query"] for b in batch], qlen))[:, None, :]
        costs = span_costs(scorer, flags, prof, 1, K)
    for L in range(1, min(K, width) + 1):
        c = width - L + 1
        n_ = norms[:, :c, L - 1]
        ok = ~torch.isnan(n_)
        cos = (dp[:, L : L + c] - dp[:, :c]) / torch.where(ok, n_, torch.ones_like(n_)).clamp(min=1e-6)
        if costs is not None:
            cos = cos - costs.of_length(L, c, 1)[..., 0]
        logits[:, :c, L - 1] = torch.where(ok, cos * scale, torch.full_like(cos, float("-inf")))
    # targets: units inside [start, end)
    targets, keep = [], []
    for r, b in enumerate(batch):
        n = int(nu[r])
        cs = pu.char_starts[r, :n]
        ce = pu.char_ends[r, :n]
        inside = ((cs >= b["start"]) & (ce <= b["end"] + 1)).nonzero()[:, 0]
        if len(inside) == 0:
            targets.append(0)
            keep.append(False)
            continue
        s, e = int(inside[0]), int(inside[-1]) + 1
        ok = e - s <= K and torch.isfinite(logits[r, s, e - s - 1])
        targets.append(s * K + (e - s - 1))
        keep.append(bool(ok))
    keep = torch.tensor(keep)
    tgt = torch.tensor(targets)
    loss = torch.nn.functional.cross_entropy(logits.view(B, -1)[keep], tgt[keep])
    if anchor:
        model[0].auto_model.disable_adapters()
        with torch.no_grad():
            teacher = model(features([b["passage"] for b in batch]))["token_embeddings"]
        model[0].auto_model.enable_adapters()
        tok_mask = pf["attention_mask"].bool()
        dist = 1 - torch.nn.functional.cosine_similarity(emb, teacher, dim=-1)
        anchor_loss = dist[tok_mask].mean()
        loss = loss + anchor * anchor_loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
    if step % 10 == 0:
        print(f"step {step} loss {loss.item():.3f} kept {int(keep.sum())} {time.time() - t0:.0f}s", flush=True)
    if step % int(sys.argv[6] if len(sys.argv) > 6 and sys.argv[6].isdigit() else 100) == 0 or step == steps:
        evaluate(step)
