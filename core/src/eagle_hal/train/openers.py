"""Openers of the user prompts that self-distillation has the target write.

Each prompt starts with one opener, chosen by the data stage's seeded generator; the target
writes the rest of the user's message, then answers it. All were written for eagle-hal from
no data set's or benchmark's prompts. ``eagle-hal train-draft --prompt-openers`` takes a
set by name (``OPENER_SETS``) or a text file of one opener a line.
"""

from __future__ import annotations

__all__ = [
    "BROAD_PROMPT_OPENERS", "BUILTIN_PROMPT_OPENERS", "OPENER_SETS", "PASSAGE_PROMPT_OPENERS",
]

# Generic openers of a user's request, written for eagle-hal (no data set's or benchmark's
# prompts): the kinds of work people ask a chat model for — writing, advice, explanation,
# role play, reasoning, arithmetic, code, editing, extraction. "" leaves the prompt free.
BUILTIN_PROMPT_OPENERS: tuple[str, ...] = (
    "",
    "",
    "Write a",
    "Explain",
    "How can I",
    "What are the",
    "Can you help me",
    "Describe",
    "Pretend you are",
    "You are a",
    "Solve",
    "Calculate",
    "If a",
    "Write a Python function",
    "Write a program",
    "Fix this code:",
    "Rewrite the following",
    "Summarize",
    "Here is a text.",
    "From the text below,",
    "Compare",
    "Give me a list of",
    "Compose",
    "Tell me",
)

# A broader set, written for eagle-hal from no data set or benchmark: many more kinds of
# writing, explanation, reasoning, code and editing requests. A head trained on BUILTIN's
# prompts agreed with the target's greedy token 0.69 of the time on answers to prompts like
# its own but 0.46 on answers to MT-bench first turns (docs/training.md).
BROAD_PROMPT_OPENERS: tuple[str, ...] = (
    "",
    "",
    # writing
    "Write a", "Compose", "Write a short story about", "Write a poem about",
    "Write a blog post about", "Write an email to", "Write a letter to", "Write a speech",
    "Write a product description for",
    "Write a dialogue between", "Write a persuasive paragraph", "Write a haiku",
    "Write a news article", "Write a review of", "Write a cover letter", "Draft a", "Compose a",
    "Create a slogan for",
    # explanation
    "Explain", "Describe", "What are the", "Explain why", "Explain how", "Explain the concept of",
    "Explain to a child", "Why do", "Why is the", "How does", "How do",
    "What is the difference between", "What is",
    "What causes", "Describe the history of", "Describe how", "Describe a",
    # advice and planning
    "How can I", "Can you help me", "Give me advice on", "Give me tips for", "Create a plan for",
    "Suggest", "Recommend", "What should I",
    # role play
    "Pretend you are", "Imagine you are", "Act as a", "You are a", "Roleplay as",
    # reasoning and arithmetic
    "Solve", "Calculate", "If a", "A train", "What is the probability", "How many",
    "Find the value of", "Prove that", "Is it true that", "Answer this riddle:",
    # code
    "Write a Python function", "Write a program", "Write a JavaScript function",
    "Write a SQL query", "Implement", "Fix this code:", "What does this code do?",
    "Write a C++ program",
    # editing and extraction
    "Rewrite the following", "Summarize", "Here is a text.", "From the text below,",
    "Correct the grammar", "Translate", "Extract", "Classify", "Paraphrase",
    # analysis and lists
    "Compare", "Give me a list of", "List", "Analyze", "Discuss", "What are the pros and cons of",
    "Tell me", "Brainstorm", "What would happen if", "Evaluate",
)

# Requests about a text that the prompt carries: each ends in a blank line, so the target
# writes the passage itself and the request is about it. The shipped head (head F, as head
# E before it) was trained on BROAD_PROMPT_OPENERS followed by these ("broad-passages"):
# head D agreed least with the target where its answers copy from the prompt (extraction,
# docs/training.md).
PASSAGE_PROMPT_OPENERS: tuple[str, ...] = (
    "Read the following article and answer the question at the end.\n\n",
    "Here is a movie review:\n\n",
    "Here is a product review:\n\n",
    "Extract all the names and dates from this text:\n\n",
    "Summarize the following paragraph:\n\n",
    "Here is a news article:\n\n",
    "Read this email and write a reply:\n\n",
    "Here is a short story:\n\n",
    "Given the following data:\n\n",
    "Answer the questions based on this passage:\n\n",
    "Rewrite this paragraph in simpler words:\n\n",
    "Find the main idea of this text:\n\n",
    "Here is a description of a scientific experiment:\n\n",
    "Here is a passage from a history book:\n\n",
)

# The sets ``--prompt-openers`` names; the order within a set is part of a data recipe (the
# seeded generator draws an index), so a set is only ever extended by a new name.
OPENER_SETS: dict[str, tuple[str, ...]] = {
    "builtin": BUILTIN_PROMPT_OPENERS,
    "broad": BROAD_PROMPT_OPENERS,
    "broad-passages": BROAD_PROMPT_OPENERS + PASSAGE_PROMPT_OPENERS,
    "none": (),
}
