"""The dashboard's CSS: the base look and presentation mode for a shared screen."""

import streamlit as st

# Presentation mode, sized for a shared 1280x720 screen: KPI values about twice their labels, labels that
# wrap instead of being cut, and tighter spacing so the verdict, the KPI rows and the table sit above the fold.
PRESENTATION_CSS = """<style>
html, body, [data-testid="stMarkdownContainer"] p, [data-testid="stMarkdownContainer"] li { font-size: 1.15rem; }
[data-testid="stMetricValue"], [data-testid="stMetricValue"] p { font-size: 2.2rem !important; line-height: 1.1; }
[data-testid="stMetricValue"] * { white-space: normal !important; overflow: visible !important; }
[data-testid="stMetricLabel"] p { font-size: 1rem !important; }
[data-testid="stMetricLabel"], [data-testid="stMetricLabel"] * { white-space: normal !important;
  overflow: visible !important; text-overflow: clip !important; }
[data-testid="stMetricDelta"] p { font-size: 0.95rem !important; }
[data-testid="stMetricDelta"], [data-testid="stMetricDelta"] * { white-space: normal !important;
  overflow: visible !important; text-overflow: clip !important; height: auto !important; }
[data-testid="stMetric"] > div { padding: 0.4rem 0.7rem !important; }
h1 { font-size: 2rem !important; padding: 0 !important; } h2 { font-size: 1.7rem !important; }
h3 { font-size: 1.4rem !important; padding: 0.3rem 0 !important; }
[data-testid="stMainBlockContainer"] { padding: 0.8rem 1.5rem 1rem 1.5rem !important; }
[data-testid="stMain"] [data-testid="stCaptionContainer"] p { font-size: 0.85rem; }
[data-testid="stDataFrame"] { font-size: 1.1rem; }
.st-key-verdict { font-size: 1.1em !important; padding: 0.5rem 0.9rem !important;
  margin: 0.1rem 0 0.3rem 0 !important; }
</style>"""
BASE_CSS = """<style>
[data-testid="stMetricValue"] { font-size: 2.3rem; }
.st-key-verdict { font-size: 1.35em; line-height: 1.45; padding: 0.8rem 1.1rem; border-left: 6px solid #1f6feb;
           background: #eef4ff; border-radius: 6px; margin: 0.3rem 0 1rem 0; }
</style>"""


def apply_css(presentation: bool) -> None:
    st.html(BASE_CSS + (PRESENTATION_CSS if presentation else ""))
