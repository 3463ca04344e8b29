"""Hugging Face folders: reading one into our GPT (folder.py) for continued pre-training."""
