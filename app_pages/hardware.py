"""Hardware: the profile's values with their sources and ridge points; two profiles side by side."""

import pandas as pd
import streamlit as st

import mapper
from app_pages import cache, hwform, ui

doc, result, sel = ui.current()
ui.header("Hardware", doc)
hw = sel.hw
st.markdown(f"**{ui.md(hw.display_name)}** ({ui.md(hw.vendor)}, {ui.md(hw.kind)}) · profile sha `{hw.sha256[:12]}`")
st.subheader("How these figures were obtained and checked")
if hw.evidence is None:
    st.text("The profile does not say how its figures were obtained or checked; each value's source is below.")
else:  # the profile's own words, as plain text (never read as markdown or HTML)
    st.text(f"Obtained: {hw.evidence.obtained}")
    st.text(f"Checked: {hw.evidence.checked}")


def ridge_table(profile) -> pd.DataFrame:
    rows = [
        {"dtype": d, "matrix peak (TFLOP/s)": peak / 1e12, "ridge (FLOP/B)": profile.ridge_point(d)}
        for d, peak in profile.matrix_peak_flops_per_s.items()
    ]
    return pd.DataFrame(rows)


c = st.columns(4)
c[0].metric("DRAM bandwidth", ui.gbps(hw.dram_bandwidth_bytes_per_s), border=True)
c[1].metric("Compute units", f"{hw.compute_units}", border=True)
c[2].metric("TDP", ui.num(hw.tdp_w, "W"), border=True)
c[3].metric(
    f"Ridge ({doc['totals']['dtype']})",
    f"{doc['totals']['peak_flops_per_s'] / hw.dram_bandwidth_bytes_per_s:,.0f} FLOP/B",
    border=True,
)
st.subheader("Matrix peaks and ridge points")
st.dataframe(
    ridge_table(hw),
    hide_index=True,
    width="stretch",
    column_config={
        "matrix peak (TFLOP/s)": st.column_config.NumberColumn(format="%.1f"),
        "ridge (FLOP/B)": st.column_config.NumberColumn(format="%.0f"),
    },
)
st.subheader("Every value and its source")


def people_values(profile) -> pd.DataFrame:
    """The profile's fields, each value in its key's unit (3.35 TB/s, 0.699 pJ), its source beside it."""
    values = hwform.flatten(profile)
    return values.assign(value=[ui.field_text(f, v) for f, v in zip(values["field"], values["value"])])


st.dataframe(
    people_values(hw),
    hide_index=True,
    width="stretch",
    height=420,
    column_config={"source": st.column_config.TextColumn(width="large")},
)

st.subheader("Side by side")
others = [n for n in mapper.list_hardware() if n != hw.name]
other_name = st.selectbox("Compare with", others, index=others.index("h200-sxm") if "h200-sxm" in others else 0)
other = cache.hardware(other_name)
this_values, other_values = hwform.flatten(hw), hwform.flatten(other)
both = people_values(hw)[["field", "value"]].merge(
    people_values(other)[["field", "value"]], on="field", how="outer", suffixes=(" (this)", " (other)")
)
ratio = this_values.merge(other_values, on="field", how="outer", suffixes=("_this", "_other"))
both["other / this"] = (ratio["value_other"] / ratio["value_this"]).to_numpy()
both = both.fillna({"value (this)": "—", "value (other)": "—"}).rename(
    columns={"value (this)": hw.display_name, "value (other)": other.display_name}
)
st.dataframe(
    both,
    hide_index=True,
    width="stretch",
    height=420,
    column_config={"other / this": st.column_config.NumberColumn(format="%.2f×")},
)
