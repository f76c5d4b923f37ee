"""Loss and learning-rate schedule against hand computations and the paper's formula."""

from __future__ import annotations

import json
import math

import pytest
import torch

from qkv import Transformer, TransformerConfig
from qkv.train.loss import TranslationLoss, label_smoothed_loss, label_smoothed_loss_from_hidden
from qkv.train.schedule import TimeBudget, lr_multiplier, paper_peak_lr


def test_label_smoothed_loss_matches_float64_hand_computation() -> None:
    logits = torch.randn(2, 3, 5)
    target = torch.tensor([[1, 4, 0], [2, 0, 0]])  # 0 = pad, ignored
    eps = 0.1
    loss, nll = label_smoothed_loss(logits, target, pad_id=0, epsilon=eps)
    expected_loss = expected_nll = 0.0
    for b in range(2):
        for t in range(3):
            y = int(target[b, t])
            if y == 0:
                continue
            logp = torch.log_softmax(logits[b, t].double(), -1)
            expected_nll += -float(logp[y])
            expected_loss += (1 - eps) * -float(logp[y]) + eps * -float(logp.mean())
    assert loss.item() == pytest.approx(expected_loss, rel=1e-5)
    assert nll.item() == pytest.approx(expected_nll, rel=1e-5)


def test_noam_schedule_is_the_papers_formula() -> None:
    d, warmup = 512, 4000
    peak = paper_peak_lr(d, warmup)
    f = lr_multiplier("noam", warmup)
    for step in (1, 10, 1000, 3999, 4000, 4001, 20000, 100000):
        paper = d**-0.5 * min(step**-0.5, step * warmup**-1.5)
        assert peak * f(step - 1) == pytest.approx(paper, rel=1e-9)
    assert peak == pytest.approx(6.99e-4, rel=1e-3)


def test_constant_schedule_warms_up_linearly() -> None:
    f = lr_multiplier("constant", 10)
    assert [f(i) for i in (0, 4, 9, 50)] == [0.1, 0.5, 1.0, 1.0]
    assert lr_multiplier("inverse_sqrt", 100)(399) == pytest.approx(math.sqrt(100 / 400))
    with pytest.raises(ValueError, match="unknown schedule"):
        lr_multiplier("rsqrt", 10)


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_annealed_schedules_warm_up_then_reach_zero_at_max_steps(schedule: str) -> None:
    """Hand formulas: after warm-up w the factor is 1 at update w+1 and falls to 0 at update `total`."""
    w, total = 4, 12
    f = lr_multiplier(schedule, w, total)
    assert [f(i) for i in range(w)] == [0.25, 0.5, 0.75, 1.0]  # updates 1..4: warm-up
    for done in range(w, total + 3):
        left = max(0.0, (total - done) / (total - w))
        want = left if schedule == "linear" else (1 + math.cos(math.pi * (1 - left))) / 2
        assert f(done) == pytest.approx(want, abs=1e-12)
    assert f(w) == 1.0 and 0 < f(total - 1) < f(total - 2) and f(total) == 0.0
    if schedule == "cosine":  # a cosine stays above the straight line in the first half, below it in the second
        assert f(w + 1) > lr_multiplier("linear", w, total)(w + 1)
        assert f(total - 2) < lr_multiplier("linear", w, total)(total - 2)
    with pytest.raises(ValueError, match="must exceed warmup"):
        lr_multiplier(schedule, w, w)
    with pytest.raises(ValueError, match="must exceed warmup"):
        lr_multiplier(schedule, w)


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_a_replanned_schedule_goes_on_from_its_rate_and_reaches_zero_at_the_new_end(
    schedule: str,
) -> None:
    """Moving the end at update 10 of 100 to 30: the factor of update 11 is the one it had, then the
    hand formula from there (anchor 10) to 0 at 30; an end past max_steps stays at max_steps."""
    w, total = 4, 100
    f = lr_multiplier(schedule, w, total)
    before = f(10)
    f.replan(10, 30)
    assert f(10) == before and f(30) == 0.0 and [f(i) for i in range(w)] == [0.25, 0.5, 0.75, 1.0]
    for done in range(10, 31):
        left = (30 - done) / 20
        shape = left if schedule == "linear" else (1 + math.cos(math.pi * (1 - left))) / 2
        assert f(done) == pytest.approx(before * shape, abs=1e-12)
    f.replan(20, 10**6)
    assert f.end == total and f(20) == pytest.approx(before * 0.5, abs=1e-12)
    warm = lr_multiplier(schedule, w, total)
    warm.replan(2, 50)  # during warm-up: the ramp stays, the decay starts after it
    assert [warm(i) for i in range(w + 1)] == [0.25, 0.5, 0.75, 1.0, 1.0] and warm(50) == 0.0
    # the plan is plain numbers in LambdaLR's state: a resumed run goes on from it
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    state = json.loads(json.dumps(torch.optim.lr_scheduler.LambdaLR(opt, f).state_dict()))
    again = lr_multiplier(schedule, w, total)
    torch.optim.lr_scheduler.LambdaLR(opt, again).load_state_dict(state)
    assert [again(i) for i in range(total)] == [f(i) for i in range(total)]


def test_schedules_that_do_not_anneal_ignore_a_new_end() -> None:
    for schedule in ("noam", "inverse_sqrt", "constant"):
        f, g = lr_multiplier(schedule, 10, 50), lr_multiplier(schedule, 10, 50)
        g.replan(20, 30)
        assert [f(i) for i in range(60)] == [g(i) for i in range(60)]


def test_a_time_budget_stops_at_the_last_validation_inside_it_and_predicts_that_step() -> None:
    """100 s, a validation every 10 updates taking 20 s: validations at 20, 40, 60, 80 s go on (the
    next one still fits), the one at 100 s stops; each predicts the run's end at update 50, with
    the end handed to the schedule one interval later (60) so that the rate is not 0 before."""
    budget = TimeBudget(100 / 3600, every=10)
    budget.start(0.0)
    ends = [budget.end_step(step, 2.0 * step) for step in (10, 20, 30, 40, 50)]
    assert ends == [60, 60, 60, 60, 50]  # 50: stop now
    slower = TimeBudget(100 / 3600, every=10)
    slower.start(30.0)  # a resumed run: its first interval counts from where it started
    assert slower.end_step(10, 50.0) == 40  # validations at 70 and 90 s; stop at 90 s (update 30)


@pytest.mark.parametrize("chunk_tokens", [None, 3, 100])
@pytest.mark.parametrize("projection", ["linear", "linear-bias", "module"])
def test_loss_from_hidden_states_equals_loss_from_logits(chunk_tokens: int | None, projection: str) -> None:
    """Dropping pads before the projection, in chunks (a linear projection's gradients computed with
    each chunk's loss, another module's chunks recomputed in backward): same loss, same gradients."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(8, 11, bias=projection == "linear-bias")
    generator = torch.nn.Sequential(linear) if projection == "module" else linear
    hidden = torch.randn(3, 5, 8, requires_grad=True)
    target = torch.randint(1, 11, (3, 5))
    target[0, 3:] = 0
    target[2, 1:] = 0
    loss, nll = label_smoothed_loss(generator(hidden), target, pad_id=0, epsilon=0.1)
    (2.5 * loss).backward()
    params = [hidden, *linear.parameters()]
    grads = [p.grad.clone() for p in params]
    for p in params:
        p.grad = None
    loss2, nll2 = label_smoothed_loss_from_hidden(hidden, generator, target, pad_id=0, epsilon=0.1,
                                                  chunk_tokens=chunk_tokens)
    (2.5 * loss2).backward()
    torch.testing.assert_close(loss2, loss)
    torch.testing.assert_close(nll2, nll)
    for p, want in zip(params, grads, strict=True):
        torch.testing.assert_close(p.grad, want)
    assert torch.all(hidden.grad[0, 3:] == 0)  # pad positions get no gradient


def test_chunked_linear_loss_under_bf16_autocast_is_the_autocast_loss() -> None:
    """Under bf16 autocast the chunked loss multiplies in bf16, as the linear layer would: the loss
    and gradients of the whole projection under autocast, within bf16's rounding."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(16, 50)
    hidden = torch.randn(4, 6, 16, requires_grad=True)
    target = torch.randint(1, 50, (4, 6))
    results = []
    for chunk in (None, 5):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss, _ = label_smoothed_loss_from_hidden(hidden, linear, target, 0, 0.1, chunk)
        loss.backward()
        results.append([loss.detach(), *(p.grad.clone() for p in (hidden, *linear.parameters()))])
        hidden.grad = linear.weight.grad = linear.bias.grad = None
    for got, want in zip(results[1], results[0], strict=True):
        torch.testing.assert_close(got.float(), want.float(), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("chunk_tokens", [None, 4])
def test_translation_loss_is_the_loss_of_the_models_logits(chunk_tokens: int | None) -> None:
    """TranslationLoss (encode, decoder, output projection on the real tokens only) == the label-smoothed
    loss of model(src, tgt_in)'s logits, with the same gradients."""
    torch.manual_seed(0)
    cfg = TransformerConfig.preset("tiny", src_vocab_size=30, dropout=0.0, attention_dropout=0.0)
    model = Transformer(cfg)
    src = torch.randint(4, 30, (3, 6))
    src[1, 4:] = cfg.pad_id
    tgt = torch.randint(4, 30, (3, 5))
    tgt[2, 2:] = cfg.pad_id
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
    loss, nll = label_smoothed_loss(model(src, tgt_in), tgt_out, cfg.pad_id, epsilon=0.1)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    loss2, nll2 = TranslationLoss(model, label_smoothing=0.1, chunk_tokens=chunk_tokens)(src, tgt_in, tgt_out)
    loss2.backward()
    torch.testing.assert_close(loss2, loss)
    torch.testing.assert_close(nll2, nll)
    assert grads.keys() == {n for n, p in model.named_parameters() if p.grad is not None}
    for name, p in model.named_parameters():
        if p.grad is not None:
            torch.testing.assert_close(p.grad, grads[name], msg=name)
