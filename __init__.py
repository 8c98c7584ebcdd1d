"""The checkout as one tree for static readers: app/ and engine/ are the ppodeck package's
app and engine (ppodeck/app and ppodeck/engine link here), so app/'s relative imports of engine/
resolve inside one package. Nothing imports this file; tests/checkout_root.py says why pytest
must not either."""
