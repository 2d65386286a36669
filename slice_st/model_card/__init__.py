"""The Hub model card template of SLICE models (installed as ``slice_st.model_card``)."""
