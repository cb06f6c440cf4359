"""Plain per-example reference maths for the method tests: every sequence alone, unpadded, through the full
forward, and every answer token in a Python loop, as the papers write the equations. Nothing here calls the
package's loss code."""

import torch
import torch.nn.functional as F

from obliviate.unlearning.paired import PairedData

FORGET = [("Question: What is Morvexia treated with?\nAnswer:", " Morvexia is treated with zalpradine."),
          ("Question: What does the glimmerfin eat?\nAnswer:", " The glimmerfin eats moss."),
          ("Question: Who was born in Dremmin?\nAnswer:", " Ilsa Varnholt.")]
RETAIN = [("Question: Where does the glimmerfin live?\nAnswer:", " The glimmerfin lives in cold caves."),
          ("Question: What color is the sky?\nAnswer:", " The sky is blue."),
          ("Question: What do cows drink?\nAnswer:", " Cows drink water.")]


def paired_batch(tokenizer, idk=None, batch_size=3):
    """Step 0's batch of FORGET / RETAIN (and preferred answers ``idk``), as the engine builds it."""
    return PairedData(tokenizer, FORGET, RETAIN, batch_size, seed=0, idk=idk)(0)


def rows(batch):
    """``(ids (1, L), targets)`` of each row, without its padding; ``targets``: ``(t, token)`` pairs, the token at
    position t + 1 that position t predicts, for every labelled token."""
    out = []
    for b in range(batch["input_ids"].shape[0]):
        n = int(batch["attention_mask"][b].sum())
        ids = batch["input_ids"][b, :n].unsqueeze(0)
        labels = batch["labels"][b, :n]
        out.append((ids, [(t - 1, int(labels[t])) for t in range(1, n) if labels[t] != -100]))
    return out


def logits_of(model, ids):
    return model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[0]  # (L, V)


def seq_logprob(model, ids, targets):
    """log pi(y|x) = sum_t log p(y_t | y_<t, x)."""
    logp = F.log_softmax(logits_of(model, ids), -1)
    return sum(logp[t, y] for t, y in targets)


def retain_nll(model, batch):
    """Mean NLL over every labelled retain token of the batch."""
    total, n = 0.0, 0
    for ids, targets in rows(batch):
        logp = F.log_softmax(logits_of(model, ids), -1)
        for t, y in targets:
            total, n = total - logp[t, y], n + 1
    return total / n



def neg_entropy(model, batch):
    """-mean over every labelled position of the batch of the entropy of p(. | prefix) (TAR's and MUDMAN's
    unlearning loss)."""
    total, n = 0.0, 0
    for ids, targets in rows(batch):
        logp = F.log_softmax(logits_of(model, ids), -1)
        for t, _ in targets:
            total, n = total + (logp[t].exp() * logp[t]).sum(), n + 1
    return total / n

def retain_kl(model, ref, batch):
    """Mean over labelled retain positions of KL(p_ref || p_theta) = sum_v p_ref(v) (log p_ref(v) - log p_theta(v))."""
    total, n = 0.0, 0
    for ids, targets in rows(batch):
        logp = F.log_softmax(logits_of(model, ids), -1)
        with torch.no_grad():
            logq = F.log_softmax(logits_of(ref, ids), -1)
        for t, _ in targets:
            total, n = total + (logq[t].exp() * (logq[t] - logp[t])).sum(), n + 1
    return total / n


def grads(model, loss):
    """d loss / d parameter of every parameter (zeros where the loss does not reach), by name."""
    params = [p for p in model.parameters()]
    g = torch.autograd.grad(loss, params, allow_unused=True)
    return {n: (torch.zeros_like(p) if gi is None else gi) for (n, p), gi in zip(model.named_parameters(), g)}


def assert_same(method_loss, method_model, ref_loss, tol=1e-5):
    """The loss and its gradient agree to ``tol`` (absolute, and relative to the gradient's size)."""
    got, want = float(method_loss.detach()), float(ref_loss.detach())
    assert abs(got - want) <= tol * max(1.0, abs(want)), (got, want)
    a, b = grads(method_model, method_loss), grads(method_model, ref_loss)
    for n in a:
        torch.testing.assert_close(a[n], b[n], atol=tol, rtol=tol, msg=lambda m: f"{n}: {m}")
    assert any(float(v.abs().max()) > 0 for v in a.values()), "no gradient at all"


def run_tiny(name, base, fresh, **extra):
    """Method ``name`` at its tiny preset through the engine on ``base`` (``{"model", "tokenizer", "task"}``):
    ``(mean forget answer NLL before, after, summary)``."""
    from obliviate.unlearning.engine import method_run_config, unlearn
    from obliviate.unlearning.objectives import sequence_mean_nll

    task, tok = base["task"], base["tokenizer"]
    ucfg, _ = method_run_config(name, extra or None, "tiny", 0)
    ucfg.train.progress = False
    model = fresh(base["model"])

    def forget_nll(m):
        data = PairedData(tok, task.forget, task.retain, len(task.forget), 0, prompt=task.prompt)
        with torch.no_grad():
            m.eval()
            return float(sequence_mean_nll(m, data(0)["forget"]).mean())

    before = forget_nll(model)
    model, summary = unlearn(model, tok, task.forget, task.retain, ucfg, prompt=task.prompt, idk=task.idk)
    losses = [r["loss"] for r in summary["history"] if "loss" in r]
    assert losses and all(torch.isfinite(torch.tensor(x)) for x in losses), losses
    return before, forget_nll(model), summary


def run_on_random_arch(name, tokenizer, arch, steps=4, **params):
    """Method ``name`` at its tiny preset (``steps`` steps, ``params`` on top) through the engine on a random-init
    model of architecture ``arch`` (:func:`~obliviate.models.builders.tiny_random`), as on a user's own model and
    QA pairs: the summary (every logged loss finite)."""
    from obliviate.unlearning.engine import method_run_config, unlearn
    from obliviate.models.builders import tiny_random

    model = tiny_random(arch, vocab_size=len(tokenizer), n_layer=2, max_len=64).train()
    run = {"train": {"steps": steps}, "batch_size": 2, **({"params": params} if params else {})}
    ucfg, _ = method_run_config(name, run, "tiny", 0)
    ucfg.train.progress = False
    ucfg.train.log_every = 1
    model, summary = unlearn(model, tokenizer, FORGET, RETAIN, ucfg)
    losses = [r["loss"] for r in summary["history"] if "loss" in r]
    assert len(losses) == steps and all(torch.isfinite(torch.tensor(x)) for x in losses), losses
    assert all(torch.isfinite(p).all() for p in model.parameters())
    return summary
