"""GGUF format layer, below both the engine and the learner: reading a GGUF's header, checking model
and LoRA adapter files before a library sees them, and writing a PEFT LoRA as a GGUF LoRA.

It imports nothing from the stages (engine, store, judge, learn, tools, ui); they import it.
"""
