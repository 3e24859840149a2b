"""Collectives over the modelled fabric: NCCL's cost model carried over the routes the
fabric has, with max-min sharing where flows meet, and nccl-tests' output."""
