"""Efficient attention variants, each with the cost it claims, each equal to the dense reference
(``attention.functional.scaled_dot_product_attention``) under the equivalent mask."""
