"""The dashboard's CSS: the base look and presentation mode for a shared screen."""

import streamlit as st

# Presentation mode, sized for a shared 1280x720 screen: KPI values about twice their labels, labels that
# wrap instead of being cut, and spacing tight enough that the verdict, the two KPI rows and the top of the
# table sit above the fold (tests/test_browser.py measures it). The main area only: the sidebar keeps its size.
# Height, not type, is what it saves: gaps 0.25rem (0.55), tiles and inputs 0.2rem padding, lines 1.3-1.4 high;
# every font size stays. Measured at 1280x720 (Llama-2-7B decode's review): step 1 ended at 812 px, now 716,
# each other step ends above 460; Llama-2-70B's Overview table ended at 731, now 675.
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
[data-testid="stMetric"] > div { padding: 0.2rem 0.8rem !important; gap: 0.1rem !important; }
[data-testid="stMetricLabel"] p, [data-testid="stMain"] [data-testid="stWidgetLabel"] p { line-height: 1.3; }
[data-testid="stMain"] [data-testid="stWidgetLabel"] { margin-bottom: 0.1rem !important; min-height: 0 !important; }
[data-testid="stMain"] [data-testid="stTextInputRootElement"],
[data-testid="stMain"] [data-testid="stNumberInputContainer"] { height: 2.1rem !important; min-height: 0 !important; }
[data-testid="stMain"] [data-baseweb="select"] > div { min-height: 2.1rem !important; }
[data-testid="stMain"] [data-testid="stButton"] button,
[data-testid="stMain"] [data-testid="stDownloadButton"] button { min-height: 2.1rem !important;
  padding-top: 0.15rem !important; padding-bottom: 0.15rem !important; }
[data-testid="stMetricDelta"] { margin-top: 0 !important; line-height: 1.2 !important; }
[data-testid="stMain"] [data-testid="stVerticalBlock"] { gap: 0.25rem; }
h1 { font-size: 1.7rem !important; padding: 0 !important; } h2 { font-size: 1.5rem !important; }
h3 { font-size: 1.3rem !important; padding: 0.1rem 0 !important; }
[data-testid="stMainBlockContainer"] { padding: 4rem 1.5rem 1rem 1.5rem !important; }
[data-testid="stMain"] [data-testid="stCaptionContainer"] p { font-size: 0.85rem; line-height: 1.4; }
[data-testid="stMain"] [data-testid="stCode"] pre { padding: 0.35rem 0.8rem !important; line-height: 1.4 !important; }
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
