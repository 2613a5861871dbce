"""Train the digits CNN: `python examples/digits.py [--epochs 20] [--precision bf16-mixed]`.
Needs the `demo` extra (scikit-learn's bundled digits): `pip install -e ".[demo]"`.

The model and data live in `surge.demo` (so `python -m surge.demo` runs the same thing);
read that file for the example code: a `surge.Module`, a `surge.DataModule`, and a Trainer.
"""

from surge.demo import main

if __name__ == "__main__":
    main()
