"""Automatic prefix caching: full blocks of prompt tokens, hashed in a chain, LRU-evicted."""

from collections import OrderedDict


class PrefixCache:
    def __init__(self, block_size: int, capacity_blocks: int, enabled: bool = True) -> None:
        self.block_size = block_size
        self.capacity_blocks = max(1, capacity_blocks)
        self.enabled = enabled
        self.blocks: OrderedDict[int, None] = OrderedDict()

    def block_hashes(self, token_ids: list[int]) -> list[int]:
        hashes = []
        previous = 0
        full = len(token_ids) - len(token_ids) % self.block_size
        for start in range(0, full, self.block_size):
            previous = hash((previous, tuple(token_ids[start : start + self.block_size])))
            hashes.append(previous)
        return hashes

    def cached_tokens(self, token_ids: list[int], hashes: list[int]) -> int:
        """Prompt tokens already in the cache (a leading run of whole blocks)."""
        if not self.enabled:
            return 0
        hit_blocks = 0
        for block_hash in hashes:
            if block_hash not in self.blocks:
                break
            self.blocks.move_to_end(block_hash)
            hit_blocks += 1
        # vLLM always recomputes at least the last prompt token to produce logits.
        limit = (len(token_ids) - 1) // self.block_size
        return min(hit_blocks, limit) * self.block_size

    def insert(self, hashes: list[int]) -> None:
        if not self.enabled:
            return
        for block_hash in hashes:
            self.blocks[block_hash] = None
            self.blocks.move_to_end(block_hash)
        while len(self.blocks) > self.capacity_blocks:
            self.blocks.popitem(last=False)
