"""Host time per emitted token of the engine's detokenisation, on the default model's
tokenizer, against decoding the whole output at every token (what the engine did before).

Feeds the token ids of a text (the README by default) to ``engine.stopping.append_tokens``
one at a time, checks the final text equals decoding all the ids at once, and times both.

    python benchmarks/bench_detokenize.py [--tokens 256,1024] [--text README.md]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default="256,1024")
    parser.add_argument("--text", type=Path, default=Path(__file__).parent.parent / "README.md")
    args = parser.parse_args()

    from eagle_hal.engine.request import Request, SamplingParams
    from eagle_hal.engine.stopping import append_tokens
    from eagle_hal.model.loading import default_model_path
    from eagle_hal.model.loading.tokenizer import Tokenizer
    from gguf import GGUFReader

    tokenizer = Tokenizer.from_gguf(GGUFReader(str(default_model_path())))
    ids = tokenizer.encode(args.text.read_text(encoding="utf-8"), add_special_tokens=False)
    for count in (int(n) for n in args.tokens.split(",")):
        if count > len(ids):
            raise SystemExit(f"the text has {len(ids)} tokens, fewer than {count}")
        request = Request(0, [1], SamplingParams(max_tokens=count + 1, ignore_eos=True))
        start = time.perf_counter()
        for token in ids[:count]:
            append_tokens(request, [token], tokenizer)
        incremental = time.perf_counter() - start
        if request.text != tokenizer.decode(ids[:count]):
            raise SystemExit("the incremental text differs from the whole decode")
        start = time.perf_counter()
        for end in range(1, count + 1):
            tokenizer.decode(ids[:end])
        whole = time.perf_counter() - start
        print(f"{count} tokens: incremental {1e6 * incremental / count:.1f} us/token, "
              f"whole output decoded per token {1e6 * whole / count:.1f} us/token")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
