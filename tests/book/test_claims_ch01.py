"""Chapter 1's claims module (book.claims.ch01): every verdict and asserting function is fed
the case that gives each verdict it can return, and a false case; C1's measurement gives what
the verdict reads."""

from __future__ import annotations

import pytest

from book.claims.ch01 import (
    C1_SEQ_LEN,
    C3_USES_SIGNAL,
    SCEPTIC_SWEEPS,
    assert_c2_depth_grows_with_n,
    assert_c3_attention_and_control_solve,
    assert_c4_paths,
    c1_eased_name,
    c1_ratio_threshold,
    c1_summary,
    c1_verdict,
    c2_verdict,
    c3_verdict,
    c4_verdict,
)
from book.pages.ch01 import recurrent_models

# ------------------------------------------------------------------------------------------
# The asserting functions fail when their claim is false
# ------------------------------------------------------------------------------------------


def test_c2_assert_passes_on_the_claim_and_fails_on_counter_examples():
    lengths = [16, 32, 64]
    assert_c2_depth_grows_with_n(lengths, {"LSTM": lengths}, {"attention": [1, 1, 1]})
    with pytest.raises(AssertionError, match="not n"):  # a fused LSTM measured as 5 at every n
        assert_c2_depth_grows_with_n(lengths, {"nn.LSTM": [5, 5, 5]}, {"attention": [1, 1, 1]})
    with pytest.raises(AssertionError, match="changes with n"):  # attention growing with n
        assert_c2_depth_grows_with_n(lengths, {"LSTM": lengths}, {"attention": lengths})
    with pytest.raises(AssertionError, match="not O"):
        assert_c2_depth_grows_with_n(lengths, {"LSTM": lengths}, {"attention": [9, 9, 9]})
    with pytest.raises(ValueError, match="at least one"):
        assert_c2_depth_grows_with_n(lengths, {}, {"attention": [1, 1, 1]})


def test_c4_assert_passes_on_the_claim_and_fails_on_counter_examples():
    rnn, attn, control = [1, 2, 3, 4], [1, 1, 1, 1], [1, None, None, None]
    assert_c4_paths(rnn, attn, control)
    with pytest.raises(AssertionError, match="RNN path"):  # an RNN measured as constant
        assert_c4_paths([7, 7, 7, 7], attn, control)
    with pytest.raises(AssertionError, match="attention path"):
        assert_c4_paths(rnn, [1, 2, 3, 4], control)
    with pytest.raises(AssertionError, match="no-mixing control"):  # what the old count said
        assert_c4_paths(rnn, attn, [5, 5, 5, 5])


def test_c3_assert_fails_when_a_reference_model_fails():
    assert_c3_attention_and_control_solve([1.0, 0.98, 0.95], [1.0, 1.0, 0.99], 0.8)
    with pytest.raises(AssertionError, match="attention did not solve"):
        assert_c3_attention_and_control_solve([1.0, 0.3, 1.0], [1.0, 1.0, 1.0], 0.8)
    with pytest.raises(AssertionError, match="control LSTM"):
        assert_c3_attention_and_control_solve([1.0, 1.0, 1.0], [0.25, 1.0, 1.0], 0.8)
    with pytest.raises(AssertionError, match="on the signal"):
        assert_c3_attention_and_control_solve([1.0, 1.0, 1.0], [1.0, 1.0, 1.0], 0.1)


def test_c3_verdict_follows_the_seeds():
    chance = [0.25, 0.26, 0.24]
    assert c3_verdict({"LSTM 32": chance}, {"forget +5": chance}) == "reproduced"
    # The reported picture: +5 works on two seeds of three.
    assert c3_verdict({"LSTM 32": chance}, {"forget +5": [0.74, 0.71, 0.26]}) == "partly"
    # A remedy that works on every seed: a tuning problem after all.
    assert c3_verdict({"LSTM 32": chance}, {"forget +5": [0.9, 0.8, 0.7]}) == "not reproduced"
    # A default LSTM that uses the signal: the failure itself is not there.
    assert c3_verdict({"LSTM 32": [C3_USES_SIGNAL, 0.3, 0.3]}, {}) == "not reproduced"
    with pytest.raises(ValueError, match="default"):
        c3_verdict({}, {"forget +5": chance})


# ------------------------------------------------------------------------------------------
# C1's verdict
# ------------------------------------------------------------------------------------------

OPEN = "LSTM, forget bias +3"


def _c1(**changes: tuple[float, float]) -> dict[str, tuple[float, float]]:
    """The chapter's picture at 500 tokens: (per-step factor, far/near ratio) per model."""
    summary = {
        "RNN (tanh)": (0.43, 1e-146),
        "GRU": (0.62, 2e-85),
        "LSTM": (0.60, 7e-88),
        OPEN: (0.97, 5e-3),
        "self-attention": (1.001, 1.02),
    }
    return summary | changes


def test_c1_verdict_reproduced_on_the_chapters_picture():
    assert c1_verdict(_c1(), eased=OPEN) == "reproduced"


def test_c1_verdict_partly_when_the_eased_model_is_cured_or_does_not_ease():
    # An open gate that keeps half the gradient over 500 steps: "does not cure" fails.
    assert c1_verdict(_c1(**{OPEN: (0.998, 0.48)}), eased=OPEN) == "partly"
    # ... or one whose gradient grows with distance (forget bias +5 on seed 1).
    assert c1_verdict(_c1(**{OPEN: (1.006, 24.0)}), eased=OPEN) == "partly"
    # An IRNN as the eased model, flat like attention.
    assert c1_verdict(_c1(IRNN=(0.999, 0.49)), eased="IRNN") == "partly"
    # A raised bias that decays as fast as the default LSTM: "eases" fails.
    assert c1_verdict(_c1(**{OPEN: (0.59, 1e-80)}), eased=OPEN) == "partly"


def test_c1_verdict_not_reproduced_without_decay_or_without_a_flat_reference():
    # A plain RNN that keeps its far gradient: no decay to ease.
    assert c1_verdict(_c1(**{"RNN (tanh)": (0.99, 1e-2)}), eased=OPEN) == "not reproduced"
    # A default LSTM losing only a few orders is not "dozens".
    assert c1_verdict(_c1(LSTM=(0.9, 1e-10)), eased=OPEN) == "not reproduced"
    # Attention that decays too: the measurement does not separate the models.
    flat_fails = _c1(**{"self-attention": (0.95, 1e-5)})
    assert c1_verdict(flat_fails, eased=OPEN) == "not reproduced"


def test_c1_thresholds_scale_with_the_distance():
    assert c1_ratio_threshold(1e-50, C1_SEQ_LEN) == pytest.approx(1e-50)
    shorter = c1_ratio_threshold(1e-50, 200)
    assert 1e-50 < shorter < 1e-10  # fewer orders over a shorter distance
    # 1e-37 over 200 tokens is the same decay per step as about 1e-114 over 500.
    short = _c1(**{"RNN (tanh)": (0.43, 1e-37), "GRU": (0.63, 8e-22), "LSTM": (0.61, 1e-22)})
    short[OPEN] = (0.98, 0.085)
    assert c1_verdict(short, eased=OPEN, seq_len=200) == "reproduced"
    assert c1_verdict(short, eased=OPEN) == "not reproduced"  # judged as if over 500 tokens


def test_c1_verdict_rejects_a_summary_without_its_models():
    with pytest.raises(ValueError, match="IRNN"):
        c1_verdict(_c1(), eased="IRNN")
    with pytest.raises(ValueError, match="seq_len"):
        c1_verdict(_c1(), eased=OPEN, seq_len=50)


def test_c1_summary_measures_what_the_verdict_reads():
    summary = c1_summary(seed=0, seq_len=120, forget_bias=3.0, eased="irnn", width=8)
    assert set(summary) == {"RNN (tanh)", "GRU", "LSTM", OPEN, "IRNN", "self-attention"}
    rate, ratio = summary["IRNN"]
    assert 0.95 < rate < 1.05 and ratio > 1e-2  # the identity keeps the gradient
    assert summary["RNN (tanh)"][1] < summary[OPEN][1]
    with pytest.raises(ValueError, match="eased"):
        c1_summary(seed=0, seq_len=120, forget_bias=3.0, eased="gru")


def test_c1_eased_name_is_the_name_the_page_gives_the_model():
    torch_models = recurrent_models(4, forget_bias=3.0)
    assert c1_eased_name("lstm", 3.0) in torch_models
    assert c1_eased_name("irnn", 3.0) == "IRNN"


def test_c1_sweep_declares_the_issues_perturbations():
    sweep = {s.claim_id: s for s in SCEPTIC_SWEEPS}["C1"]
    assert sweep.baseline["forget_bias"] == 3.0
    changed = {key for p in sweep.perturbations for key in p.kwargs}
    assert changed == {"seed", "forget_bias", "eased", "seq_len"}


# ------------------------------------------------------------------------------------------
# C2 and C4: the verdicts
# ------------------------------------------------------------------------------------------

LENGTHS = [8, 16, 32, 64]


def test_c2_verdict_reproduced_partly_and_not():
    lstm, attention = {"LSTM": LENGTHS, "GRU": LENGTHS}, {"attention": [1, 1, 1, 1]}
    assert c2_verdict(LENGTHS, lstm, attention) == "reproduced"
    # A linear recurrence computed by a parallel scan: log n rounds, not n.
    scan = lstm | {"linear recurrence, scan": [3, 4, 5, 6]}
    assert c2_verdict(LENGTHS, scan, attention) == "partly"
    # No recurrent network needs n rounds: nothing waits for the previous step.
    assert c2_verdict(LENGTHS, {"scan": [3, 4, 5, 6]}, attention) == "not reproduced"
    # Attention whose depth grows with n, or is deep: no contrast.
    assert c2_verdict(LENGTHS, lstm, {"attention": LENGTHS}) == "not reproduced"
    assert c2_verdict(LENGTHS, lstm, {"attention": [9, 9, 9, 9]}) == "not reproduced"
    with pytest.raises(ValueError, match="at least one"):
        c2_verdict(LENGTHS, {}, attention)


def test_c4_verdict_reproduced_partly_and_not():
    rnn, attn, control = [1, 2, 3, 4], [1, 1, 1, 1], [1, None, None, None]
    assert c4_verdict(rnn, attn, control) == "reproduced"
    # Two layers at every distance: constant, but not one round.
    assert c4_verdict(rnn, [2, 2, 2, 2], control) == "partly"
    assert c4_verdict([7, 7, 7, 7], attn, control) == "not reproduced"  # RNN path constant
    assert c4_verdict(rnn, [1, 2, 3, 4], control) == "not reproduced"  # attention grows
    assert c4_verdict(rnn, [1, None, 1, 1], control) == "not reproduced"  # no path somewhere
    # A control that finds paths where there are none: the measurement cannot be trusted.
    assert c4_verdict(rnn, attn, [5, 5, 5, 5]) == "not reproduced"
    with pytest.raises(ValueError, match="one length"):
        c4_verdict(rnn, attn[:2], control)


# ------------------------------------------------------------------------------------------
# C3: the sceptic's sweep
# ------------------------------------------------------------------------------------------


def test_c3_sweep_declares_seeds_budget_and_size():
    sweep = {s.claim_id: s for s in SCEPTIC_SWEEPS}["C3"]
    assert sweep.baseline == {"seeds": [0, 1, 2], "steps": 120, "hidden_size": 32, "num_layers": 1}
    kwargs = [dict(p.kwargs) for p in sweep.perturbations]
    assert {"seeds": [3, 4, 5]} in kwargs
    assert any(k.get("steps", 0) >= 3 * 120 for k in kwargs)
    assert {"hidden_size", "num_layers"} <= {key for k in kwargs for key in k}


def test_c3_sweep_run_runs_and_judges_at_a_tiny_budget():
    from book.claims import VERDICTS
    from book.claims.ch01 import c3_sweep_run

    run = c3_sweep_run(seeds=[0], steps=2, hidden_size=8, num_layers=2)
    assert run.verdict in VERDICTS
    assert run.numbers["model"] == "LSTM 8×2" and run.numbers["steps"] == 2
    assert {"LSTM 8×2", "LSTM 8×2, forget bias +3", "LSTM 8×2, forget bias +5"} <= set(run.numbers)
    with pytest.raises(ValueError, match="seeds"):
        c3_sweep_run(seeds=[], steps=2, hidden_size=8, num_layers=1)


# ------------------------------------------------------------------------------------------
# C2 and C4: the sceptic's sweeps (measurements, no training)
# ------------------------------------------------------------------------------------------


def test_c2_sweep_run_measures_depth_and_judges():
    from book.claims.ch01 import c2_sweep_run

    run = c2_sweep_run(lengths=[4, 8], width=4, scan_counted=False)
    assert run.verdict == "reproduced"
    assert run.numbers["nn.LSTM"] == "4/8" and run.numbers["attention"] == "1/1"
    assert run.numbers["scan"] == "2/3"  # log2 n rounds
    # Counting the scan as an RNN is the false case of "any RNN": partly.
    assert c2_sweep_run(lengths=[4, 8], width=4, scan_counted=True).verdict == "partly"


def test_c4_sweep_run_measures_paths_and_judges():
    from book.claims.ch01 import c4_sweep_run

    run = c4_sweep_run(seq_len=8, width=4, attention_layers=2)
    assert run.verdict == "reproduced"
    assert run.numbers["LSTM"] == "d=0: 1, d=1: 2, d=7: 8"
    assert run.numbers["control"] == "d=0: 1, d=1: None, d=7: None"
