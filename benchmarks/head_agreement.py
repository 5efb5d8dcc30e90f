"""How often a draft head agrees with the target on answers to benchmark prompts.

For each prompt the target answers greedily (plain decoding); then, teacher-forced over
that answer, the head reads the target's true features and its argmax is compared with
the target's greedy token at every answer position (the figure a trainer reports as
validation top-1, here on prompts it never trained on). The target's mean top probability
over the same positions says how sure the target itself was. Several heads can be given:
each is measured on the same answers, in one process.

    python benchmarks/head_agreement.py --dataset benchmarks/data/mt_bench_question.jsonl \\
        --num-prompts 10 --max-new-tokens 128 --draft default --draft OTHER_HEAD

With ``--chain S`` it also unrolls each head S draft steps over its own outputs (as a
greedy chain drafts; ``train.unrolled``) and reports, per head, the acceptance at each depth
given the depths before it were accepted (over every answer position as a chain's origin),
and the tokens per verify pass a chain of S would give when its iterations start where a
real run's do (at the prompt's end, then one past each iteration's accepted tokens); that
figure matches the engine's accept length up to rounding.

With ``--per-category N`` (a JSONL file with categories, as MT-bench's) it measures the
first N questions of each category and adds a line per category. With ``--draft-vocab V``
(repeatable) each head is also measured drafting from its V most frequent tokens
(``draft_vocab.json``; column ``HEAD@V``), and a column ``in@V`` gives the share of the
target's greedy tokens that lie in that vocabulary (the most such a head can agree).

The command above with ``--draft default`` alone (CPU, float32, `make demo`'s prompt + the
first 10 MT-bench first turns, 128 tokens, 1,316 positions): the shipped head agrees 0.609,
the target's mean top probability 0.600.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from eagle_hal.api import LLM
from eagle_hal.commands.bench_prompts import load_prompts
from eagle_hal.engine.request import SamplingParams
from eagle_hal.model.draft_vocab import restrict
from eagle_hal.model.loading import default_draft_path, load_eagle_head
from eagle_hal.speculative.config import SpecConfig
from eagle_hal.train.dense import draft_forward, target_features
from eagle_hal.train.unrolled import unrolled_draft_forward

DEMO_PROMPT = "Explain in a few sentences why the sky is blue."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--model", default=None, help="GGUF or HF directory (default: SmolLM2)")
    parser.add_argument("--draft", action="append", default=None,
                        help='head directory or "default"; repeat to compare heads')
    parser.add_argument("--dataset", default="mt-bench")
    parser.add_argument("--num-prompts", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--no-demo-prompt", action="store_true",
                        help="leave out `make demo`'s prompt (measured first by default)")
    parser.add_argument("--per-category", type=int, default=None, metavar="N",
                        help="the first N questions of every category of a JSONL --dataset "
                             "(MT-bench: writing, roleplay, ...), with a summary per category")
    parser.add_argument("--chain", type=int, default=0, metavar="S",
                        help="also the per-depth acceptance of a greedy chain of S draft steps")
    parser.add_argument("--draft-vocab", type=int, action="append", default=[], metavar="V",
                        help="also measure each head drafting from its V most frequent tokens")
    args = parser.parse_args()
    drafts = args.draft or ["default"]
    llm = LLM(model=args.model, draft=None, device=args.device, dtype=args.dtype,
              spec=SpecConfig(num_steps=0), progress=False)
    heads = {}
    for name in drafts:
        path = default_draft_path(args.model) if name == "default" else name
        if path is None:
            raise SystemExit(f"no head ships for {args.model}: give --draft DIRECTORY")
        heads[name] = load_eagle_head(path, llm.target, dtype=llm.dtype)
        for size in args.draft_vocab:
            if size >= llm.target.config.vocab_size:
                raise SystemExit(f"--draft-vocab {size}: the whole vocabulary is the head itself")
            heads[f"{name}@{size}"] = restrict(heads[name], path, size)
    # "in@V": the target's greedy tokens among the V most frequent (a restricted head's ids)
    vocabularies = {f"in@{v}": next(h for n, h in heads.items() if n.endswith(f"@{v}"))._vocab_ids
                    for v in args.draft_vocab}
    if args.per_category:
        chosen = by_category(args.dataset, args.per_category)
    else:
        chosen = [("all", t) for t in load_prompts(args.dataset, args.num_prompts)]
    if not args.no_demo_prompt:
        chosen.insert(0, ("demo", DEMO_PROMPT))
    per_category: dict[str, list[float]] = {}  # category -> [positions, target p, *hits]
    columns = [*heads, *vocabularies]
    agree = {name: 0 for name in columns}
    positions, confidence = 0, 0.0
    chains = {name: ChainTally(args.chain) for name in heads} if args.chain else {}
    print(f"{'prompt':<44} {'tokens':>6} {'target p':>8} "
          + " ".join(f"{n[-18:]:>18}" for n in columns))
    for category, text in chosen:
        prompt = llm.encode(text, chat=True)
        answer = llm.generate([prompt], SamplingParams(max_tokens=args.max_new_tokens))[0]
        tokens = torch.tensor(prompt + list(answer.token_ids), device=llm.target.device)
        start = len(prompt)
        # Draft position i reads token i + 1 with feature i and predicts token i + 2.
        where = torch.arange(start - 2, len(tokens) - 2, device=tokens.device)
        with torch.no_grad():
            features = target_features(llm.target, tokens[None])[0]
            target_probs = llm.target.compute_logits(features[where + 1]).float().softmax(-1)
            greedy = target_probs.argmax(-1)
            row, hits_row = [], []
            for name, head in heads.items():
                out = draft_forward(head, tokens[None, 1:], features[None, :-1])[0]
                hits = int((head.compute_logits(out[where]).argmax(-1) == greedy).sum())
                agree[name] += hits
                hits_row.append(hits)
                row.append(f"{hits / len(where):>18.3f}")
                if name in chains:
                    chains[name].add(head, tokens, features, start)
            for name, ids in vocabularies.items():
                hits = int(torch.isin(greedy, ids).sum())
                agree[name] += hits
                hits_row.append(hits)
                row.append(f"{hits / len(where):>18.3f}")
        positions += len(where)
        confidence += float(target_probs.max(-1).values.sum())
        totals = per_category.setdefault(category, [0.0] * (2 + len(columns)))
        for i, value in enumerate([len(where), float(target_probs.max(-1).values.sum()),
                                   *hits_row]):
            totals[i] += value
        print(f"{text[:44]!r:<44} {len(where):>6} "
              f"{float(target_probs.max(-1).values.mean()):>8.3f} "
              + " ".join(row), flush=True)
    if args.per_category:
        for category, (count, sure, *hits) in per_category.items():
            print(f"{'category ' + category:<44} {int(count):>6} {sure / count:>8.3f} "
                  + " ".join(f"{h / count:>18.3f}" for h in hits))
    print(f"{'all':<44} {positions:>6} {confidence / positions:>8.3f} "
          + " ".join(f"{agree[n] / positions:>18.3f}" for n in columns))
    for name, tally in chains.items():
        print(tally.summary(name))


class ChainTally:
    """Per-depth acceptance of a head's greedy chain of ``steps`` draft tokens, teacher-forced
    over the target's answers (``--chain``)."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.reached = [0] * (steps + 1)  # origins whose depths 1 .. d - 1 were all accepted
        self.accepted = [0] * (steps + 1)  # ... and depth d too
        self.passes = 0  # verify passes of the simulated runs
        self.emitted = 0  # tokens they emit

    @torch.no_grad()
    def add(self, head, tokens: torch.Tensor, features: torch.Tensor, start: int) -> None:
        """One answer: ``tokens`` prompt + answer, ``features`` the target's over them,
        ``start`` the prompt's length."""
        steps, n = self.steps, len(tokens)
        outs = unrolled_draft_forward(head, tokens[None, 1:], features[None, :-1], steps)
        # A chain at origin o (the draft holds 0 .. o, its root is token o + 1) drafts at
        # depth d from step d's output at position o + d - 1, a guess of token o + d + 1.
        origins = torch.arange(start - 1, n - 2, device=tokens.device)
        right = torch.zeros(len(origins), steps, dtype=torch.bool, device=tokens.device)
        for depth in range(1, steps + 1):
            at = origins + depth - 1
            inside = at + 2 < n
            at = at.clamp(max=n - 3)
            guess = head.compute_logits(outs[depth - 1][0, at]).argmax(-1)
            right[:, depth - 1] = (guess == tokens[at + 2]) & inside
        leading = right.int().cumprod(dim=1)  # depths 1 .. d all accepted
        for depth in range(1, steps + 1):
            before = leading[:, depth - 2] if depth > 1 else torch.ones_like(leading[:, 0])
            self.reached[depth] += int(before.sum())
            self.accepted[depth] += int(leading[:, depth - 1].sum())
        lengths = leading.sum(dim=1).tolist()
        origin = 0
        while origin < len(lengths):  # where a real run's iterations start
            self.passes += 1
            self.emitted += lengths[origin] + 1
            origin += lengths[origin] + 1

    def summary(self, name: str) -> str:
        rates = " ".join(
            f"{self.accepted[d] / max(self.reached[d], 1):.3f}" for d in range(1, self.steps + 1)
        )
        return (f"chain S={self.steps} {name}: acceptance by depth {rates}; "
                f"tokens per verify pass {self.emitted / max(self.passes, 1):.3f}")


def by_category(path: str, per_category: int) -> list[tuple[str, str]]:
    """The first ``per_category`` first turns of every category of a JSONL question file,
    in the file's order of categories."""
    chosen: dict[str, list[str]] = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            if "category" not in record:
                raise SystemExit(f"--per-category: {path} has a question without a category")
            texts = chosen.setdefault(record["category"], [])
            if len(texts) < per_category:
                texts.append(str(record["turns"][0]))
    return [(category, text) for category, texts in chosen.items() for text in texts]


if __name__ == "__main__":
    main()
