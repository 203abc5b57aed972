"""The engine-neutral rules of the contract over a narrow per-engine seam.

The abort fence, exact in-flight counts, weight-version order, the prefix-cache scope, the weight
swap and the model's limits live here once for every engine. Imports only the contract.
"""
