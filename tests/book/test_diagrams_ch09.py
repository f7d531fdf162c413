"""Chapter 9's Post-LN/Pre-LN diagram draws what the text describes: Pre-LN's one final
LayerNorm, above the last residual addition, and none in the Post-LN column."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from book.diagrams.ch09 import layernorm_placement  # noqa: E402


def test_pre_ln_ends_with_a_final_layernorm_above_its_last_addition():
    fig = layernorm_placement()
    try:
        (ax,) = fig.axes
        texts = [(t.get_text(), t.get_position()) for t in ax.texts]
        finals = [pos for text, pos in texts if text == "final LayerNorm"]
        assert len(finals) == 1
        (x_final, y_final) = finals[0]
        # the Pre-LN column (the right one): its additions lie below the final LayerNorm
        adds = [pos for text, pos in texts if text == "+" and abs(pos[0] - x_final) < 0.5]
        assert len(adds) == 2 and all(y < y_final for _, y in adds)
        output = [pos for text, pos in texts if text == "output" and abs(pos[0] - x_final) < 0.5]
        assert len(output) == 1 and output[0][1] > y_final
        # the Post-LN column has no final LayerNorm: every LayerNorm there follows a "+"
        post = [pos for text, pos in texts if text == "final LayerNorm" and pos[0] < 5]
        assert post == []
    finally:
        plt.close(fig)
