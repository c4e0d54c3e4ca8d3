"""The custom resources: their models (what the operator validates), parsing, and
the CRDs and admission policies generated from them. Pure: no API calls.
"""
