"""The dashboard's CSS: the base look and presentation mode for a shared screen."""

import streamlit as st

# Presentation mode, sized for a shared 1280x720 screen: KPI values about twice their labels, labels that
# wrap instead of being cut, and spacing tight enough that the verdict, the two KPI rows and the top of the
# table sit above the fold (tests/test_browser.py measures it). The main area only: the sidebar keeps its size.
PRESENTATION_CSS = """<style>
[data-testid="stMain"] [data-testid="stMarkdownContainer"] p,
[data-testid="stMain"] [data-testid="stMarkdownContainer"] li { font-size: 1.1rem; }
[data-testid="stMetricValue"], [data-testid="stMetricValue"] p { font-size: 2rem !important; line-height: 1.15; }
[data-testid="stMetricLabel"] p { font-size: 1rem !important; }
[data-testid="stMetricLabel"], [data-testid="stMetricLabel"] * { white-space: normal !important;
  overflow: visible !important; text-overflow: clip !important; }
[data-testid="stMetricDelta"] p { font-size: 0.9rem !important; }
[data-testid="stMetricDelta"], [data-testid="stMetricDelta"] * { white-space: normal !important;
  overflow: visible !important; text-overflow: clip !important; height: auto !important; }
[data-testid="stMetric"] > div { padding: 0.35rem 0.8rem !important; gap: 0.1rem !important; }
[data-testid="stMetricDelta"] { margin-top: 0 !important; line-height: 1.2 !important; }
[data-testid="stMain"] [data-testid="stVerticalBlock"] { gap: 0.55rem; }
h1 { font-size: 1.7rem !important; padding: 0 !important; } h2 { font-size: 1.5rem !important; }
h3 { font-size: 1.3rem !important; padding: 0.1rem 0 !important; }
[data-testid="stMainBlockContainer"] { padding: 4.2rem 1.5rem 1rem 1.5rem !important; }
[data-testid="stMain"] [data-testid="stCaptionContainer"] p { font-size: 0.85rem; }
[data-testid="stMain"] [data-testid="stCode"] pre { padding: 0.35rem 0.8rem !important; }
[data-testid="stDataFrame"] { font-size: 1.05rem; }
.st-key-verdict { padding: 0.4rem 0.9rem !important; margin: 0 !important; line-height: 1.35 !important; }
.st-key-verdict p { font-size: 1.05rem !important; }
</style>"""
BASE_CSS = """<style>
[data-testid="stMetricValue"] { font-size: 2.3rem; }
.st-key-verdict { font-size: 1.35em; line-height: 1.45; padding: 0.8rem 1.1rem; border-left: 6px solid #1f6feb;
           background: #eef4ff; border-radius: 6px; margin: 0.3rem 0 1rem 0; }
</style>"""


def apply_css(presentation: bool) -> None:
    st.html(BASE_CSS + (PRESENTATION_CSS if presentation else ""))
