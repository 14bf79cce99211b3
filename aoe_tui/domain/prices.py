"""Per-model token prices (the season file's ``[prices."MODEL"]`` tables) and the cost
arithmetic: integers only, **µUSD** (10⁻⁶ USD) per **million tokens**.

opencode computes a cost from its own model table and has no cache term: cache reads
and writes are billed by providers at their own rates, so a season can give its own
prices. A price table row in the season file, in USD per million tokens (as providers
publish them)::

    [prices."opencode-go/kimi-k3"]
    input_per_mtok = 0.60          # USD per 1M uncached input tokens
    output_per_mtok = 2.50         # USD per 1M output tokens (reasoning included)
    cache_read_per_mtok = 0.15     # USD per 1M input tokens read from the cache
    cache_write_per_mtok = 0.60    # USD per 1M input tokens written to the cache

Each price is converted once to an integer µUSD per million tokens
(:func:`microusd_per_mtok`: ``round(usd × 10⁶)``); a cost is then
``(Σ tokens × µUSD-per-Mtok + 500 000) // 1 000 000`` µUSD — one rounding (half up) of
the exact sum, no floats. A cache price that is not given is the input price (a
provider without a cache discount).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ModelPrice", "PriceRates", "cost_microusd", "microusd_per_mtok"]

#: tokens per price unit (prices are per million tokens)
MTOK = 1_000_000

UsdPerMtok = Annotated[float, Field(ge=0, le=1_000_000)]  # strict float takes ints too: one error line


def microusd_per_mtok(usd_per_mtok: float) -> int:
    """USD per million tokens → integer µUSD per million tokens (``round(usd × 10⁶)``)."""
    return round(float(usd_per_mtok) * 1_000_000)


def cost_microusd(*terms: tuple[int, int]) -> int:
    """Cost in µUSD of ``(tokens, µUSD per million tokens)`` terms: the exact sum
    divided by 10⁶, rounded half up (integers only; negative token counts count 0)."""
    total = sum(max(0, int(tokens)) * int(rate) for tokens, rate in terms)
    return (total + MTOK // 2) // MTOK


class PriceRates(BaseModel):
    """One model's rates in integer **µUSD per million tokens** (see :meth:`ModelPrice.rates`)."""

    model_config = ConfigDict(frozen=True)

    input: int
    output: int
    cache_read: int
    cache_write: int

    def cost(self, input_tokens: int, output_tokens: int, cache_read_tokens: int = 0,
             cache_write_tokens: int = 0) -> int:
        """Cost in µUSD. ``input_tokens`` are the **uncached** input tokens (tokens),
        ``cache_read_tokens`` / ``cache_write_tokens`` the input tokens read from / written
        to the provider's cache, ``output_tokens`` output (reasoning included)."""
        return cost_microusd((input_tokens, self.input), (output_tokens, self.output),
                             (cache_read_tokens, self.cache_read), (cache_write_tokens, self.cache_write))


class ModelPrice(BaseModel):
    """``[prices."MODEL"]``: one model's prices in **USD per million tokens** (floats as
    providers publish them; converted to integer µUSD per million tokens before any
    arithmetic). ``cache_read_per_mtok`` / ``cache_write_per_mtok`` default to the input
    price."""

    model_config = ConfigDict(extra="forbid", strict=True)

    input_per_mtok: UsdPerMtok
    output_per_mtok: UsdPerMtok
    cache_read_per_mtok: UsdPerMtok | None = None
    cache_write_per_mtok: UsdPerMtok | None = None

    def rates(self) -> PriceRates:
        """The rates in integer µUSD per million tokens."""
        inp = microusd_per_mtok(self.input_per_mtok)
        return PriceRates(
            input=inp, output=microusd_per_mtok(self.output_per_mtok),
            cache_read=inp if self.cache_read_per_mtok is None else microusd_per_mtok(self.cache_read_per_mtok),
            cache_write=inp if self.cache_write_per_mtok is None else microusd_per_mtok(self.cache_write_per_mtok))
