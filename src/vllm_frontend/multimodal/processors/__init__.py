"""The models' image and audio processors in numpy and Pillow, each equal to transformers'
processor of its family (PIL backend), and what each decides about an item's prompt tokens."""
